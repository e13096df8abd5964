"""A model of ggml's compute-buffer sizing: build a graph of tensor shapes, schedule it over backends
the way ``ggml_backend_sched`` does, and allocate it the way ``ggml-alloc`` does.

llama.cpp sizes each backend's compute buffer by reserving one worst-case graph: the scheduler
(``ggml/src/ggml-backend.cpp``, ``ggml_backend_sched_split_graph``) assigns every node to a backend
(passes 1-4), cuts the node list into splits and gives each split a copy of every input that lives on
another backend (pass 5), and ``ggml_gallocr_reserve_n_size`` (``ggml/src/ggml-alloc.c``) walks that
split graph once, allocating each node when it is computed (in place over a parent when the op
allows it) and freeing a tensor after its last consumer, in a best-fit free list per buffer. The
buffer size is the high-water mark. Nothing here is fitted: the three steps are ported one to one;
only the graph (``Graph``'s ops, called by ``memory``'s builders) has to match llama.cpp's.

Tensors carry shapes, strides and types but no data; sizes are ``ggml_nbytes``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

# block size and bytes per block of the GGML types used here (ggml.c type_traits)
TYPES: dict[str, tuple[int, int]] = {
    "f32": (1, 4),
    "f16": (1, 2),
    "bf16": (1, 2),
    "i8": (1, 1),
    "i32": (1, 4),
    "i64": (1, 8),
    "q8_0": (32, 34),
    "q4_0": (32, 18),
    "q4_1": (32, 20),
    "q5_0": (32, 22),
    "q5_1": (32, 24),
    "iq4_nl": (32, 18),
    "mxfp4": (32, 17),
    "q2_K": (256, 84),
    "q3_K": (256, 110),
    "q4_K": (256, 144),
    "q5_K": (256, 176),
    "q6_K": (256, 210),
}

VIEW_OPS = frozenset({"VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"})
INPLACE_OPS = frozenset(
    {
        "FILL", "SCALE", "DIAG_MASK_ZERO", "DIAG_MASK_INF", "ADD", "ADD_ID", "ADD1", "SUB", "MUL", "DIV",
        "SQR", "SQRT", "LOG", "UNARY", "ROPE", "ROPE_BACK", "SILU_BACK", "RMS_NORM", "RMS_NORM_BACK",
        "CLAMP", "SOFT_MAX", "SOFT_MAX_BACK",
    }
)  # fmt: skip
MAX_COPIES = 4  # GGML_SCHED_MAX_COPIES: input copies per backend with pipeline parallelism


def row_size(ggml_type: str, n: int) -> int:
    """Bytes of ``n`` consecutive elements of ``ggml_type`` (``ggml_row_size``)."""
    block, size = TYPES[ggml_type]
    return n // block * size


class Tensor:
    """A graph tensor: type, shape ``ne`` and strides ``nb`` (4-d, GGML order), the op that makes it
    and its sources, the tensor it views (``view_src``, ``view_offs``), and where it lives when it is
    pre-allocated (``buffer``: a buffer-type name; ``weights`` marks model weights)."""

    __slots__ = (
        "_nbytes", "backend", "buffer", "flags_input", "flags_output", "hash", "name", "nb", "ne", "op",
        "src", "type", "view_offs", "view_src", "weights",
    )  # fmt: skip

    def __init__(
        self,
        ggml_type: str,
        ne: Sequence[int],
        op: str = "NONE",
        src: Sequence[Tensor | None] = (),
        name: str = "",
        nb: Sequence[int] | None = None,
        view_src: Tensor | None = None,
        view_offs: int = 0,
    ) -> None:
        self.type = ggml_type
        self.ne = tuple(ne) + (1,) * (4 - len(ne))
        self.nb = tuple(nb) if nb is not None else contiguous_nb(ggml_type, self.ne)
        self.op = op
        self.src: list[Tensor | None] = list(src)
        self.name = name
        self.view_src = view_src
        self.view_offs = view_offs
        self.buffer: str | None = None
        self.weights = False
        self.flags_input = False
        self.flags_output = False
        self._nbytes = -1
        self.backend = -1  # the scheduler's choice for it, while ``schedule`` runs
        self.hash: int | None = None  # the index of the allocator's record of it, while ``allocate`` runs

    def __repr__(self) -> str:
        return f"Tensor({self.name!r}, {self.op}, {self.type}, {self.ne})"

    @property
    def nbytes(self) -> int:
        """``ggml_nbytes``: the span the strides cover (kept: a tensor's type, shape and strides are
        fixed when it is made)."""
        if self._nbytes < 0:
            self._nbytes = self._span()
        return self._nbytes

    def _span(self) -> int:
        block, size = TYPES[self.type]
        if any(n == 0 for n in self.ne):
            return 0
        if block == 1:
            return size + sum((n - 1) * s for n, s in zip(self.ne, self.nb))
        return self.ne[0] * self.nb[0] // block + sum((n - 1) * s for n, s in zip(self.ne[1:], self.nb[1:]))

    @property
    def nelements(self) -> int:
        return self.ne[0] * self.ne[1] * self.ne[2] * self.ne[3]

    def is_contiguous(self) -> bool:
        return self.nb == contiguous_nb(self.type, self.ne)

    @property
    def home(self) -> str | None:
        """The buffer type of the tensor or of the tensor it views, when pre-allocated."""
        return self.view_src.buffer if self.view_src is not None else self.buffer


def contiguous_nb(ggml_type: str, ne: Sequence[int]) -> tuple[int, int, int, int]:
    """Strides of a contiguous tensor: element (or block) size, then each row's span."""
    block, size = TYPES[ggml_type]
    nb0 = size
    nb1 = nb0 * (ne[0] // block)
    nb2 = nb1 * ne[1]
    nb3 = nb2 * ne[2]
    return (nb0, nb1, nb2, nb3)


# ---- graph building ---------------------------------------------------------------------------------


class Graph:
    """Tensors and the ggml ops the llama.cpp graphs use, with ggml's result shapes, source order and
    view semantics, and ``expand`` (``ggml_build_forward_expand``: a depth-first visit of sources in
    order, appending unseen tensors as leafs (no op) or nodes)."""

    def __init__(self) -> None:
        self.nodes: list[Tensor] = []
        self.leafs: list[Tensor] = []
        self._seen: set[int] = set()

    # tensors without an op

    def weight(self, ggml_type: str, ne: Sequence[int], buffer: str, name: str = "") -> Tensor:
        """A model weight, pre-allocated in ``buffer`` (marks its ops for that buffer's backend)."""
        t = Tensor(ggml_type, ne, name=name)
        t.buffer, t.weights = buffer, True
        return t

    def cache(self, ggml_type: str, ne: Sequence[int], buffer: str, name: str = "") -> Tensor:
        """A pre-allocated tensor that is not a weight (a KV cache or recurrent state)."""
        t = Tensor(ggml_type, ne, name=name)
        t.buffer = buffer
        return t

    def input(self, ggml_type: str, ne: Sequence[int], name: str = "") -> Tensor:
        """A graph input (``ggml_set_input``): the scheduler puts it on the CPU."""
        t = Tensor(ggml_type, ne, name=name)
        t.flags_input = True
        return t

    # views

    def view(self, a: Tensor, ne: Sequence[int], nb: Sequence[int] | None = None, offs: int = 0) -> Tensor:
        """``ggml_view_Nd``: ``nb`` defaults to ``a``'s strides for the leading dimensions."""
        ne = tuple(ne) + (1,) * (4 - len(ne))
        if nb is None:
            nb = a.nb
        nb = tuple(nb) + tuple(a.nb[len(nb) :])
        if len(nb) < 4:
            nb = nb + (nb[-1] * ne[len(nb) - 1],) * (4 - len(nb))
        base = a.view_src or a
        return Tensor(a.type, ne, "VIEW", [a], nb=nb, view_src=base, view_offs=a.view_offs + offs)

    def view_nd(self, a: Tensor, ne: Sequence[int], nb_rest: Sequence[int], offs: int = 0) -> Tensor:
        """``ggml_view_Nd(a, ne..., nb1..., offs)``: element stride from ``a``, later strides given,
        unused trailing strides extended as ggml does (``nb[i] = nb[i-1]*ne[i-1]``)."""
        ne = tuple(ne) + (1,) * (4 - len(ne))
        nb = [a.nb[0], *nb_rest]
        while len(nb) < 4:
            nb.append(nb[-1] * ne[len(nb) - 1])
        base = a.view_src or a
        return Tensor(a.type, ne, "VIEW", [a], nb=nb, view_src=base, view_offs=a.view_offs + offs)

    def reshape(self, a: Tensor, *ne: int) -> Tensor:
        base = a.view_src or a
        return Tensor(a.type, ne, "RESHAPE", [a], view_src=base, view_offs=a.view_offs)

    def permute(self, a: Tensor, *axes: int) -> Tensor:
        ne = [0] * 4
        nb = [0] * 4
        for i, ax in enumerate(axes):
            ne[ax], nb[ax] = a.ne[i], a.nb[i]
        base = a.view_src or a
        return Tensor(a.type, ne, "PERMUTE", [a], nb=nb, view_src=base, view_offs=a.view_offs)

    def transpose(self, a: Tensor) -> Tensor:
        ne = (a.ne[1], a.ne[0], a.ne[2], a.ne[3])
        nb = (a.nb[1], a.nb[0], a.nb[2], a.nb[3])
        base = a.view_src or a
        return Tensor(a.type, ne, "TRANSPOSE", [a], nb=nb, view_src=base, view_offs=a.view_offs)

    def view_tensor(self, a: Tensor, op: str, src: Sequence[Tensor | None]) -> Tensor:
        """An op whose result is a view of ``a`` (``ggml_view_tensor``: set_rows, cpy, in-place ops)."""
        base = a.view_src or a
        return Tensor(a.type, a.ne, op, src, nb=a.nb, view_src=base, view_offs=a.view_offs)

    # ops

    def op(self, op: str, ggml_type: str, ne: Sequence[int], *src: Tensor | None) -> Tensor:
        """A new contiguous result of ``op`` over ``src``."""
        return Tensor(ggml_type, ne, op, src)

    def unary(self, op: str, a: Tensor, *more: Tensor | None) -> Tensor:
        """An elementwise op with ``a``'s type and shape (``ggml_dup_tensor``)."""
        return Tensor(a.type, a.ne, op, [a, *more])

    def mul_mat(self, a: Tensor, b: Tensor) -> Tensor:
        return self.op("MUL_MAT", "f32", (a.ne[1], b.ne[1], b.ne[2], b.ne[3]), a, b)

    def mul_mat_id(self, a: Tensor, b: Tensor, ids: Tensor) -> Tensor:
        return self.op("MUL_MAT_ID", "f32", (a.ne[1], ids.ne[0], b.ne[2], 1), a, b, ids)

    def get_rows(self, a: Tensor, b: Tensor) -> Tensor:
        ggml_type = "i32" if a.type == "i32" else "f32"
        return self.op("GET_ROWS", ggml_type, (a.ne[0], b.ne[0], b.ne[1], b.ne[2]), a, b)

    def set_rows(self, a: Tensor, b: Tensor, c: Tensor) -> Tensor:
        return self.view_tensor(a, "SET_ROWS", [b, c, a])

    def cpy(self, a: Tensor, b: Tensor) -> Tensor:
        return self.view_tensor(b, "CPY", [a, b])

    def cast(self, a: Tensor, ggml_type: str) -> Tensor:
        t = Tensor(ggml_type, a.ne, "CPY", [a])
        t.src.append(t)
        return t

    def cont(self, a: Tensor, *ne: int) -> Tensor:
        return self.op("CONT", a.type, ne or a.ne, a)

    def argsort_top_k(self, a: Tensor, k: int) -> Tensor:
        s = self.op("ARGSORT", "i32", a.ne, a)
        return self.view_nd(s, (k, s.ne[1], s.ne[2], s.ne[3]), s.nb[1:])

    def sum_rows(self, a: Tensor) -> Tensor:
        return self.op("SUM_ROWS", a.type, (1, a.ne[1], a.ne[2], a.ne[3]), a)

    def glu(self, a: Tensor, b: Tensor | None) -> Tensor:
        ne = a.ne if b is not None else (a.ne[0] // 2, *a.ne[1:])
        return self.op("GLU", a.type, ne, a, b)

    def flash_attn_ext(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, sinks: Tensor | None
    ) -> Tensor:
        return self.op("FLASH_ATTN_EXT", "f32", (v.ne[0], q.ne[2], q.ne[1], q.ne[3]), q, k, v, mask, sinks)

    def soft_max_ext(self, a: Tensor, mask: Tensor | None = None, sinks: Tensor | None = None) -> Tensor:
        src: list[Tensor | None] = [a, mask] + ([sinks] if sinks is not None else [])
        return Tensor(a.type, a.ne, "SOFT_MAX", src)

    def concat(self, a: Tensor, b: Tensor, dim: int) -> Tensor:
        ne = list(a.ne)
        ne[dim] += b.ne[dim]
        return self.op("CONCAT", a.type, ne, a, b)

    def repeat_4d(self, a: Tensor, *ne: int) -> Tensor:
        return self.op("REPEAT", a.type, ne, a)

    # graph

    def expand(self, t: Tensor) -> None:
        """``ggml_build_forward_expand``: visit sources first (in order), then ``t``."""
        stack: list[tuple[Tensor, int]] = [(t, 0)]
        if id(t) in self._seen:
            return
        self._seen.add(id(t))
        while stack:
            node, i = stack.pop()
            if i < len(node.src):
                stack.append((node, i + 1))
                s = node.src[i]
                if s is not None and id(s) not in self._seen:
                    self._seen.add(id(s))
                    stack.append((s, 0))
                continue
            (self.leafs if node.op == "NONE" else self.nodes).append(node)


# ---- scheduling ----------------------------------------------------------------------------------------


@dataclass
class Backends:
    """The scheduler's backends in priority order, each with its default buffer type, and which
    buffer types each backend can read. The last backend is the CPU. ``offload_min_batch``: the batch
    from which device ``offload_from`` takes an op whose weight sits in host memory (``offload_op``: 32
    for CUDA, ``GGML_OP_OFFLOAD_MIN_BATCH``; the scheduler asks the devices in order, and the ones
    before it, reached over RPC, have no ``offload_op``); 0: never."""

    names: list[str]
    bufts: list[str]
    readable: list[frozenset[str]]
    offload_min_batch: int = 0
    offload_from: int = 0

    @property
    def cpu(self) -> int:
        return len(self.names) - 1

    @functools.cached_property
    def first_reader(self) -> dict[str, int]:
        """The first backend that reads each buffer type (where a tensor in it is computed)."""
        out: dict[str, int] = {}
        for i, readable in enumerate(self.readable):
            for buft in readable:
                out.setdefault(buft, i)
        return out


def rpc_backends(n_devices: int, host_bufts: Iterable[str] = ("CPU", "CPU_REPACK")) -> Backends:
    """``RPC0..RPCn-1`` then the CPU: each RPC backend reads only its own buffers; the CPU reads the
    host buffer types."""
    names = [f"RPC{i}" for i in range(n_devices)] + ["CPU"]
    bufts = [f"RPC{i}" for i in range(n_devices)] + ["CPU"]
    readable = [frozenset({f"RPC{i}"}) for i in range(n_devices)] + [frozenset(host_bufts)]
    return Backends(names, bufts, readable)


@dataclass
class Schedule:
    """A split graph: the node list the allocator walks (``nodes``, with a backend each), the leafs
    (``leafs``, with a backend each), and the number of splits. Splitting rewires the graph's own
    tensors (a source read across backends becomes its copy; graph inputs become outputs with several
    copies); ``restore`` undoes that, so the graph can be scheduled again."""

    nodes: list[Tensor] = field(default_factory=list)
    node_backend: list[int] = field(default_factory=list)
    leafs: list[Tensor] = field(default_factory=list)
    leaf_backend: list[int] = field(default_factory=list)
    n_splits: int = 0
    rewired: list[tuple[Tensor, int, Tensor | None]] = field(default_factory=list)
    flagged: list[tuple[Tensor, bool]] = field(default_factory=list)

    def restore(self) -> None:
        """The graph's tensors as they were before ``schedule``."""
        for t, j, s in reversed(self.rewired):
            t.src[j] = s
        for t, was in reversed(self.flagged):
            t.flags_output = was
        self.rewired.clear()
        self.flagged.clear()


def _backend_from_buffer(be: Backends, t: Tensor) -> int:
    home = t.home
    return -1 if home is None else be.first_reader.get(home, -1)


def op_batch_size(t: Tensor) -> int:
    """``get_op_batch_size`` (``ggml-cuda.cu``): the batch an op runs over, as ``offload_op`` weighs it."""
    if t.op == "GET_ROWS":
        return 0
    if t.op == "MUL_MAT":
        return t.ne[1]
    if t.op in ("MUL_MAT_ID", "ROPE"):
        return t.ne[2]
    return t.ne[1] * t.ne[2] * t.ne[3]


def _from_cur(be: Backends, tensors: Iterable[Tensor]) -> None:
    """Pass 1 (``ggml_backend_sched_backend_id_from_cur``) over ``tensors``, setting each one's
    ``backend``: pre-allocated tensors stay where they are, inputs go to the CPU, ops with a weight
    source go where the weight is (except ROPE and flash attention, whose small weights must not
    decide), or, for a weight in host memory, to the first device that offloads a batch that large
    (cause ``1.off``)."""
    reader = be.first_reader.get
    cpu, offload, offload_from = be.cpu, be.offload_min_batch, be.offload_from
    for t in tensors:
        view = t.view_src
        home = view.buffer if view is not None else t.buffer
        b = -1 if home is None else reader(home, -1)
        if b == -1:
            if t.flags_input:
                b = cpu
            elif t.op not in ("ROPE", "FLASH_ATTN_EXT"):
                for s in t.src:
                    if s is not None and s.buffer is not None and s.weights:
                        b = _backend_from_buffer(be, s)
                        if b == cpu and offload and op_batch_size(t) >= offload:
                            b = offload_from
                        break
        t.backend = b


def _buffer_supported(be: Backends, t: Tensor, b: int) -> bool:
    """``ggml_backend_sched_buffer_supported``: can backend ``b`` read ``t`` where it is (or will be)."""
    home = t.home
    if home is None:
        tb = t.backend
        if tb == -1 and t.view_src is not None:
            tb = t.view_src.backend
        if tb == -1:
            return False
        home = be.bufts[tb]
    return home in be.readable[b]


def schedule(
    graph: Graph, be: Backends, n_copies: int = 1, weight_bytes: Callable[[str], int | None] | None = None
) -> Schedule:
    """``ggml_backend_sched_split_graph``: assign backends (passes 1-4, each graph tensor's ``backend``),
    split, add input copies, and lay out the graph the allocator sees (each split's inputs, then its
    nodes; leafs: with several copies the graph inputs' and split inputs' copies first, then the
    graph's own leafs). ``weight_bytes`` gives a weight's stored bytes by its name (None: not known, the
    graph's own size): an offloaded op's weight is copied whole into the device's compute buffer, so its
    copy has the weight's own size."""
    cpu = be.cpu
    _from_cur(be, graph.leafs)
    _from_cur(be, graph.nodes)

    compute = [t for t in graph.nodes if t.op not in VIEW_OPS]

    def expand(order: Iterable[Tensor], skip_cpu: bool) -> None:
        cur = -1
        for t in order:
            b = t.backend
            if b != -1:
                cur = -1 if (skip_cpu and b == cpu) else b
            elif cur != -1:
                t.backend = cur

    expand(compute, True)
    expand(reversed(compute), True)
    expand(compute, False)
    expand(reversed(compute), False)

    # pass 3: unassigned nodes go to the backend that can read most of their inputs
    for t in compute:
        if t.backend != -1:
            continue
        best, best_n = -1, -1
        for b in range(len(be.names)):
            n = 0
            for s in t.src:
                if s is None:
                    continue
                assigned = s.backend != -1 or (s.view_src is not None and s.view_src.backend != -1)
                if assigned and _buffer_supported(be, s, b):
                    n += 1
            if n > best_n:
                best, best_n = b, n
        t.backend = best

    # pass 4: views and unassigned sources follow their view source or their consumer
    for t in graph.nodes:
        view = t.view_src
        if view is not None and t.backend == -1:
            t.backend = view.backend
        for s in t.src:
            if s is not None and s.backend == -1:
                s.backend = s.view_src.backend if s.view_src is not None else t.backend
        if t.backend == -1:
            t.backend = 0

    # pass 5: splits and input copies
    out = Schedule()
    splits: list[tuple[int, int, int, list[Tensor]]] = []  # (backend, start, end, inputs)
    copies: dict[tuple[int, int], list[Tensor]] = {}
    nodes = graph.nodes
    first = 0
    while first < len(nodes) and nodes[first].op in VIEW_OPS:
        first += 1
    cur = nodes[first].backend if first < len(nodes) else 0
    start, inputs = 0, []
    views = VIEW_OPS
    for i in range(first, len(nodes)):
        t = nodes[i]
        if t.op in views:
            continue
        b = t.backend
        src = t.src
        need_new = False
        if b == cur and inputs:
            for s in src:
                weight = s is not None and s.buffer is not None and s.weights
                if weight and s.backend != cur and not _buffer_supported(be, s, cur):
                    need_new = True
                    break
        if b != cur or need_new:
            splits.append((cur, start, i, inputs))
            cur, start, inputs = b, i, []
        for j, s in enumerate(src):
            if s is None or s.backend == cur or _buffer_supported(be, s, cur):
                continue
            key = (id(s), cur)
            if key not in copies:
                made = []
                stored = weight_bytes(s.name) if weight_bytes is not None and s.weights else None
                for _ in range(n_copies):
                    if stored is not None:
                        c = Tensor("i8", (stored,), name=f"{be.names[cur]}#{s.name}")
                    else:
                        c = Tensor(s.type, s.ne, nb=s.nb, name=f"{be.names[cur]}#{s.name}")
                    if n_copies > 1:
                        c.flags_input = c.flags_output = True
                    made.append(c)
                copies[key] = made
                inputs.append(s)
            out.rewired.append((t, j, s))
            t.src[j] = copies[key][0]
    splits.append((cur, start, len(nodes), inputs))

    out.n_splits = len(splits)
    graph_inputs = [t for t in graph.leafs if t.flags_input] if n_copies > 1 else []
    for b, s0, s1, ins in splits:
        for s in ins:
            dep = Tensor(s.type, s.ne, nb=s.nb, src=[s], view_src=s.view_src or s)
            out.nodes.append(dep)
            out.node_backend.append(s.backend)
            out.nodes.append(copies[(id(s), b)][0])
            out.node_backend.append(b)
        part = nodes[s0:s1]
        out.nodes.extend(part)
        out.node_backend.extend([t.backend for t in part])
    if n_copies > 1:
        for t in graph_inputs:
            out.flagged.append((t, t.flags_output))
            t.flags_output = True
            for c in range(n_copies):
                leaf = t if c == 0 else Tensor(t.type, t.ne, nb=t.nb, name=f"{t.name}#{c}")
                leaf.flags_input = leaf.flags_output = True
                out.leafs.append(leaf)
                out.leaf_backend.append(t.backend)
        for b, _, _, ins in splits:
            for s in ins:
                for c in copies[(id(s), b)]:
                    out.leafs.append(c)
                    out.leaf_backend.append(b)
    out.leafs.extend(graph.leafs)
    out.leaf_backend.extend([t.backend for t in graph.leafs])
    return out


# ---- allocation -------------------------------------------------------------------------------------


class DynAllocator:
    """``ggml_dyn_tallocr`` with one chunk (the buffers here have no size limit): best fit among the
    free blocks but the last, else the last block, which grows the chunk; freed ranges merge with
    their neighbours. ``max_size`` is the buffer size the reservation reports."""

    def __init__(self, alignment: int) -> None:
        self.alignment = alignment
        self.blocks: list[list[int]] = [[0, 1 << 62]]  # [offset, size], sorted by offset
        self.max_size = 0

    def _align(self, size: int) -> int:
        a = self.alignment
        return (size + a - 1) // a * a

    def alloc(self, size: int) -> int:
        a = self.alignment
        size = (size + a - 1) // a * a
        blocks = self.blocks
        best, best_size = -1, 1 << 63
        for i in range(len(blocks) - 1):
            free = blocks[i][1]
            if size <= free <= best_size:
                best, best_size = i, free
        if best == -1:
            best = len(blocks) - 1
        block = blocks[best]
        offset = block[0]
        block[0] += size
        block[1] -= size
        if block[1] == 0:
            del blocks[best]
        if offset + size > self.max_size:
            self.max_size = offset + size
        return offset

    def free(self, offset: int, size: int) -> None:
        a = self.alignment
        size = (size + a - 1) // a * a
        blocks = self.blocks
        for i, block in enumerate(blocks):
            if block[0] + block[1] == offset:
                block[1] += size
                if i + 1 < len(blocks) and block[0] + block[1] == blocks[i + 1][0]:
                    block[1] += blocks[i + 1][1]
                    del blocks[i + 1]
                return
            if offset + size == block[0]:
                block[0] = offset
                block[1] += size
                if i > 0 and blocks[i - 1][0] + blocks[i - 1][1] == block[0]:
                    blocks[i - 1][1] += block[1]
                    del blocks[i]
                return
        pos = 0
        while pos < len(blocks) and blocks[pos][0] < offset:
            pos += 1
        blocks.insert(pos, [offset, size])


def allocate(sched: Schedule, n_buffers: int, alignment: int = 32) -> list[int]:
    """``ggml_gallocr_alloc_graph_impl`` + ``reserve_n_size``: the high-water mark of each buffer
    (one per backend) when the scheduled graph is allocated in order."""
    allocs = [DynAllocator(alignment) for _ in range(n_buffers)]
    # a fresh record for every tensor the walk can reach: the leafs and nodes, whose sources and view
    # sources are leafs and nodes too (``Graph.expand`` visits every source; a view's source chain
    # reaches the tensor it views); a tensor's ``hash`` is its record's index while the walk runs and
    # None afterwards, so a tensor reached otherwise fails loudly
    tensors = [*sched.leafs, *sched.nodes]
    for i, t in enumerate(tensors):
        t.hash = i
    try:
        return _walk(sched, allocs, len(tensors))
    finally:
        for t in tensors:
            t.hash = None


def _walk(sched: Schedule, allocs: list[DynAllocator], n: int) -> list[int]:
    """The allocation walk of ``allocate`` over ``n`` records (``ggml-alloc.c``'s hash nodes: children
    and views still to come, the buffer and offset, whether allocated), kept as parallel lists indexed
    by each tensor's ``hash``."""
    n_children = [0] * n
    n_views = [0] * n
    buffer_of = [-1] * n
    addr = [0] * n
    allocated = [False] * n
    inplace = INPLACE_OPS

    def allocate_node(t: Tensor, buffer: int) -> None:
        i = t.hash
        if t.buffer is not None or allocated[i] or t.view_src is not None:
            return
        allocated[i] = True
        if t.op in inplace:
            for p in t.src:
                if p is None:
                    continue
                j = p.hash
                if not allocated[j]:
                    continue
                view = p.view_src
                if p.flags_output or (view is not None and view.flags_output):
                    continue
                if p.type != t.type or p.ne != t.ne or p.nb != t.nb:
                    continue
                if n_children[j] == 1 and n_views[j] == 0:
                    if view is not None:
                        k = view.hash
                        if n_views[k] == 1 and n_children[k] == 0:
                            buffer_of[i], addr[i] = buffer_of[j], addr[j]
                            allocated[j] = False
                            allocated[k] = False
                            _free_extra(t, view, k)
                            return
                    else:
                        buffer_of[i], addr[i] = buffer_of[j], addr[j]
                        allocated[j] = False
                        _free_extra(t, p, j)
                        return
        buffer_of[i] = buffer
        addr[i] = allocs[buffer].alloc(t.nbytes)

    def _free_extra(node: Tensor, parent: Tensor, j: int) -> None:
        a = allocs[buffer_of[j]]
        psize, nsize = a._align(parent.nbytes), a._align(node.nbytes)
        if psize > nsize:
            a.free(addr[j] + nsize, psize - nsize)

    for t, b in zip(sched.leafs, sched.leaf_backend):
        allocate_node(t, b)
    for t, b in zip(sched.nodes, sched.node_backend):
        view = t.view_src
        if view is not None and t.op != "NONE":
            n_views[view.hash] += 1
        if t.flags_input:
            allocate_node(t, b)
        for s in t.src:
            if s is None:
                continue
            n_children[s.hash] += 1
            if s.flags_input:
                allocate_node(s, b)
    for t, b in zip(sched.nodes, sched.node_backend):
        src = t.src
        for p in src:
            if p is not None and p.buffer is None and p.view_src is None and not allocated[p.hash]:
                allocate_node(p, b)
        if t.buffer is None and t.view_src is None and not allocated[t.hash]:
            allocate_node(t, b)
        for p in src:
            if p is None:
                continue
            j = p.hash
            left = n_children[j] - 1
            n_children[j] = left
            if left == 0 and n_views[j] == 0:
                view = p.view_src
                if view is not None:
                    k = view.hash
                    n_views[k] -= 1
                    if n_views[k] == 0 and n_children[k] == 0 and allocated[k] and not view.flags_output:
                        allocs[buffer_of[k]].free(addr[k], view.nbytes)
                        allocated[k] = False
                elif allocated[j] and not p.flags_output:
                    allocs[buffer_of[j]].free(addr[j], p.nbytes)
                    allocated[j] = False
    return [a.max_size for a in allocs]

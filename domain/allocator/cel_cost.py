"""Kubernetes' worst-case cost of a DRA selector, estimated before it runs.

The API server rejects a new DeviceClass or ResourceClaim whose selector's estimated cost exceeds
``resourceapi.CELSelectorExpressionMaxCost`` (1,000,000): ``CompileCELExpression`` in
k8s.io/dynamic-resource-allocation/cel calls cel-go's ``checker.Cost`` with Kubernetes' estimators
(``draCostEstimator`` over ``library.CostEstimator`` and the DRA ``sizeEstimator``), and
``validateCELSelector`` compares the maximum with the limit. The scheduler applies the same limit
to the actual cost while it evaluates.

cel-expr-python has neither a cost estimator nor a cost tracker, so this module ports the
estimate (cel-go v0.29.2 ``checker/cost.go``, k8s.io/apiserver v0.37.2 ``pkg/cel/library/cost.go``
and k8s.io/dynamic-resource-allocation v0.37.2 ``cel/compile.go``, the versions of Kubernetes
1.37) over the checked AST that the C++ checker serializes (``cel.expr.CheckedExpr``, read here
from its protobuf wire format: no protobuf library is needed for that much).

Where the C++ checker types a value more loosely than Kubernetes does (``device`` is a
``map(string, dyn)`` here, an object type there, so its attributes and capacity are ``dyn``), the
type Kubernetes declares for that path through ``device`` is used, as are only the overloads
that type admits.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = ["COST_LIMIT", "Checked", "CostRange", "estimate_cost", "parse_checked"]

# resourceapi.CELSelectorExpressionMaxCost (k8s.io/api/resource/v1).
COST_LIMIT = 1_000_000

MAX_UINT64 = (1 << 64) - 1
_TWO_TO_64 = float(1 << 64)

# k8s.io/api/resource/v1 limits the DRA size estimator declares for the device.
DRIVER_NAME_MAX_LENGTH = 63
DEVICE_MAX_DOMAIN_LENGTH = 63
DEVICE_MAX_ID_LENGTH = 32
ATTRIBUTES_AND_CAPACITIES_PER_DEVICE = 32
ATTRIBUTE_VALUES_PER_DEVICE = 48
DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH = 64

# cel-go common/cost.go.
SELECT_AND_IDENT_COST = 1
CONST_COST = 0
LIST_CREATE_BASE_COST = 10
MAP_CREATE_BASE_COST = 30
STRUCT_CREATE_BASE_COST = 40
STRING_TRAVERSAL_COST_FACTOR = 0.1
REGEX_STRING_LENGTH_COST_FACTOR = 0.25

_ACCUMULATORS = ("__result__", "@result")


# ---------------------------------------------------------------------------
# Ranges (cel-go's SizeEstimate and CostEstimate: the same arithmetic, saturating at 2^64-1)


def _add(x: int, y: int) -> int:
    return min(x + y, MAX_UINT64)


def _mul(x: int, y: int) -> int:
    return min(x * y, MAX_UINT64)


def _by_factor(x: int, factor: float) -> int:
    xf = float(x)
    if xf > 0 and factor > 0 and xf > float(MAX_UINT64) / factor:
        return MAX_UINT64
    product = math.ceil(xf * factor)
    if product >= _TWO_TO_64:
        return MAX_UINT64
    return int(product)


class CostRange(NamedTuple):
    """A [min, max] range of sizes or costs."""

    min: int
    max: int

    def add(self, other: CostRange) -> CostRange:
        return CostRange(_add(self.min, other.min), _add(self.max, other.max))

    def multiply(self, other: CostRange) -> CostRange:
        return CostRange(_mul(self.min, other.min), _mul(self.max, other.max))

    def by_factor(self, factor: float) -> CostRange:
        return CostRange(_by_factor(self.min, factor), _by_factor(self.max, factor))

    def union(self, other: CostRange) -> CostRange:
        return CostRange(min(self.min, other.min), max(self.max, other.max))


def _fixed(n: int) -> CostRange:
    return CostRange(n, n)


UNKNOWN = CostRange(0, MAX_UINT64)
ZERO = _fixed(0)
ONE = _fixed(1)


# ---------------------------------------------------------------------------
# The checked AST


class CelType(NamedTuple):
    """A checked type: ``kind`` as cel-go's ``types.Kind`` names it, with a name and parameters."""

    kind: str  # dyn, null, bool, int, uint, double, string, bytes, timestamp, duration, any,
    # list, map, struct, type_param, opaque, type, error, function
    name: str = ""
    params: tuple[CelType, ...] = ()


DYN = CelType("dyn")
STRING = CelType("string")
BOOL = CelType("bool")
_PRIMITIVES = {1: "bool", 2: "int", 3: "uint", 4: "double", 5: "string", 6: "bytes"}
_WELL_KNOWN = {1: "any", 2: "timestamp", 3: "duration"}
# Kubernetes declares these as object types (cel.ObjectType): kind struct.
_OBJECT_TYPES = frozenset({"kubernetes.Quantity", "kubernetes.Semver"})


@dataclass(eq=False, slots=True)
class Expr:
    """One node of the checked expression; ``kind`` is literal, ident, select, call, list, map,
    struct or comprehension."""

    id: int = 0
    kind: str = ""
    value: Any = None  # literal: the Python value
    literal: str = ""  # literal: null, bool, int, uint, double, string, bytes, duration, timestamp
    name: str = ""  # ident name, select field, call function, struct message name
    test_only: bool = False
    target: Expr | None = None  # select operand, member call target
    args: list[Expr] = field(default_factory=list)  # call args, list elements, map/struct values
    keys: list[Expr | None] = field(default_factory=list)  # map keys (None for struct fields)
    iter_var: str = ""
    iter_var2: str = ""
    accu_var: str = ""
    iter_range: Expr | None = None
    accu_init: Expr | None = None
    loop_condition: Expr | None = None
    loop_step: Expr | None = None
    result: Expr | None = None

    def walk(self) -> Iterator[Expr]:
        yield self
        for child in (self.target, self.iter_range, self.accu_init, self.loop_condition, self.loop_step, self.result):
            if child is not None:
                yield from child.walk()
        for key in self.keys:
            if key is not None:
                yield from key.walk()
        for arg in self.args:
            yield from arg.walk()


@dataclass(slots=True)
class Checked:
    """What the checker said of an expression: its AST, each call's overloads, each node's type,
    and each node's offset in the source (code points)."""

    expr: Expr
    overloads: dict[int, list[str]]
    types: dict[int, CelType]
    positions: dict[int, int]
    line_offsets: list[int]

    def location(self, node: Expr) -> tuple[int, int]:
        """1-based line and column of ``node``, as cel-go reports them."""
        offset = self.positions.get(node.id, 0)
        line, start = 1, 0
        for line_offset in self.line_offsets:
            if line_offset > offset:
                break
            line += 1
            start = line_offset
        return line, offset - start + 1


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, i
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, Any]]:
    """(field number, value) of a protobuf message: an int for varints and fixed-width numbers'
    raw bytes, bytes for length-delimited fields."""
    i, n = 0, len(buf)
    while i < n:
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
            yield number, value
        elif wire == 2:
            length, i = _varint(buf, i)
            yield number, buf[i : i + length]
            i += length
        elif wire == 1:
            yield number, buf[i : i + 8]
            i += 8
        elif wire == 5:
            yield number, buf[i : i + 4]
            i += 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")


def _signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _packed_ints(buf: bytes) -> list[int]:
    out, i = [], 0
    while i < len(buf):
        v, i = _varint(buf, i)
        out.append(_signed64(v))
    return out


def _type(buf: bytes) -> CelType:
    for number, value in _fields(buf):
        if number == 1:
            return DYN
        if number == 2:
            return CelType("null")
        if number in (3, 4):
            return CelType(_PRIMITIVES.get(value, "dyn"))
        if number == 5:
            return CelType(_WELL_KNOWN.get(value, "dyn"))
        if number == 6:
            elem = next((_type(v) for n, v in _fields(value) if n == 1), DYN)
            return CelType("list", "list", (elem,))
        if number == 7:
            key, val = DYN, DYN
            for n, v in _fields(value):
                if n == 1:
                    key = _type(v)
                elif n == 2:
                    val = _type(v)
            return CelType("map", "map", (key, val))
        if number == 8:
            return CelType("function")
        if number == 9:
            return CelType("struct", value.decode())
        if number == 10:
            return CelType("type_param", value.decode())
        if number == 11:
            return CelType("type", "type", (_type(value),))
        if number == 12:
            return CelType("error")
        if number == 14:
            name, params = "", []
            for n, v in _fields(value):
                if n == 1:
                    name = v.decode()
                elif n == 2:
                    params.append(_type(v))
            kind = "struct" if name in _OBJECT_TYPES else "opaque"
            return CelType(kind, name, tuple(params))
    return DYN


def _constant(buf: bytes, node: Expr) -> None:
    node.kind = "literal"
    node.literal, node.value = "null", None
    for number, value in _fields(buf):
        if number == 1:
            node.literal, node.value = "null", None
        elif number == 2:
            node.literal, node.value = "bool", bool(value)
        elif number == 3:
            node.literal, node.value = "int", _signed64(value)
        elif number == 4:
            node.literal, node.value = "uint", value
        elif number == 5:
            node.literal, node.value = "double", struct.unpack("<d", value)[0]
        elif number == 6:
            node.literal, node.value = "string", value.decode("utf-8", "surrogatepass")
        elif number == 7:
            node.literal, node.value = "bytes", bytes(value)
        elif number == 8:
            node.literal, node.value = "duration", None
        elif number == 9:
            node.literal, node.value = "timestamp", None


def _text(value: bytes) -> str:
    return value.decode()


# cel.expr.Expr's messages: field number -> (attribute, decoder); "args" collects a repeated field.
_SELECT: dict[int, tuple[str, Callable[[Any], Any]]] = {}
_CALL: dict[int, tuple[str, Callable[[Any], Any]]] = {}
_COMPREHENSION: dict[int, tuple[str, Callable[[Any], Any]]] = {}


def _fill(node: Expr, buf: bytes, fields: dict[int, tuple[str, Callable[[Any], Any]]]) -> None:
    for number, value in _fields(buf):
        known = fields.get(number)
        if known is None:
            continue
        attribute, decode = known
        if attribute == "args":
            node.args.append(decode(value))
        else:
            setattr(node, attribute, decode(value))


def _expr(buf: bytes) -> Expr:
    node = Expr()
    for number, value in _fields(buf):
        if number == 2:
            node.id = _signed64(value)
        elif number == 3:
            _constant(value, node)
        elif number == 4:
            node.kind = "ident"
            node.name = next((v.decode() for n, v in _fields(value) if n == 1), "")
        elif number == 5:
            node.kind = "select"
            _fill(node, value, _SELECT)
        elif number == 6:
            node.kind = "call"
            _fill(node, value, _CALL)
        elif number == 7:
            node.kind = "list"
            node.args = [_expr(v) for n, v in _fields(value) if n == 1]
        elif number == 8:
            _struct(node, value)
        elif number == 9:
            node.kind = "comprehension"
            _fill(node, value, _COMPREHENSION)
    return node


def _struct(node: Expr, buf: bytes) -> None:
    """A map literal (no message name, keys are expressions) or a message literal."""
    node.kind = "map"
    for number, value in _fields(buf):
        if number == 1 and value:
            node.kind, node.name = "struct", value.decode()
        elif number == 2:
            key: Expr | None = None
            entry_value = Expr()
            for n, v in _fields(value):
                if n == 3:
                    key = _expr(v)
                elif n == 4:
                    entry_value = _expr(v)
            node.keys.append(key)
            node.args.append(entry_value)


_SELECT.update({1: ("target", _expr), 2: ("name", _text), 3: ("test_only", bool)})
_CALL.update({1: ("target", _expr), 2: ("name", _text), 3: ("args", _expr)})
_COMPREHENSION.update(
    {
        1: ("iter_var", _text),
        8: ("iter_var2", _text),
        2: ("iter_range", _expr),
        3: ("accu_var", _text),
        4: ("accu_init", _expr),
        5: ("loop_condition", _expr),
        6: ("loop_step", _expr),
        7: ("result", _expr),
    }
)


def parse_checked(serialized: bytes) -> Checked:
    """Read the ``google.protobuf.Any`` holding a ``cel.expr.CheckedExpr`` (``Expression.serialize()``)."""
    payload = serialized
    outer = dict(_fields(serialized))
    if isinstance(outer.get(1), bytes) and outer[1].endswith(b"cel.expr.CheckedExpr"):
        payload = outer.get(2, b"")
    expr = Expr()
    overloads: dict[int, list[str]] = {}
    types: dict[int, CelType] = {}
    positions: dict[int, int] = {}
    line_offsets: list[int] = []
    for number, value in _fields(payload):
        if number == 2:
            key, ids = 0, []
            for n, v in _fields(value):
                if n == 1:
                    key = _signed64(v)
                elif n == 2:
                    ids = [o.decode() for rn, o in _fields(v) if rn == 3]
            if ids:
                overloads[key] = ids
        elif number == 3:
            key, t = 0, DYN
            for n, v in _fields(value):
                if n == 1:
                    key = _signed64(v)
                elif n == 2:
                    t = _type(v)
            types[key] = t
        elif number == 4:
            expr = _expr(value)
        elif number == 5:
            for n, v in _fields(value):
                if n == 3:
                    line_offsets += _packed_ints(v) if isinstance(v, bytes) else [_signed64(v)]
                elif n == 4:
                    entry = dict(_fields(v))
                    positions[_signed64(entry.get(1, 0))] = _signed64(entry.get(2, 0))
    return Checked(expr, overloads, types, positions, line_offsets)


# ---------------------------------------------------------------------------
# What Kubernetes declares of ``device`` (compile.go's newCompiler, the StoredExpressions type
# with allowMultipleAllocations and list-type attributes), for sizes and types by path.


@dataclass(frozen=True, eq=False)
class _Decl:
    type: CelType
    max_elements: int = 0
    fields: dict[str, _Decl] = field(default_factory=dict)
    key: _Decl | None = None
    elem: _Decl | None = None


_QUANTITY = CelType("struct", "kubernetes.Quantity")
_ATTRIBUTE = _Decl(DYN, max(DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH, ATTRIBUTE_VALUES_PER_DEVICE))
_DOMAIN = _Decl(STRING, DEVICE_MAX_DOMAIN_LENGTH)
_ID = _Decl(STRING, DEVICE_MAX_ID_LENGTH)


def _map_decl(key: _Decl, elem: _Decl) -> _Decl:
    return _Decl(CelType("map", "map", (key.type, elem.type)), ATTRIBUTES_AND_CAPACITIES_PER_DEVICE, key=key, elem=elem)


_ATTRIBUTES = _map_decl(_DOMAIN, _map_decl(_ID, _ATTRIBUTE))
_CAPACITY = _map_decl(_DOMAIN, _map_decl(_ID, _Decl(_QUANTITY, 0)))
_DEVICE = _Decl(
    CelType("struct", "kubernetes.DRADevice"),
    0,
    fields={
        "driver": _Decl(STRING, DRIVER_NAME_MAX_LENGTH),
        "allowMultipleAllocations": _Decl(BOOL, 1),
        "attributes": _ATTRIBUTES,
        "capacity": _CAPACITY,
    },
)


def _device_size(path: tuple[str, ...] | None) -> CostRange | None:
    """The DRA ``sizeEstimator.EstimateSize``: the declared maximum along a path from ``device``."""
    if not path or path[0] != "device":
        return None
    node = _DEVICE
    for name in path[1:]:
        if name in ("@items", "@values"):
            if node.elem is None:
                return None
            node = node.elem
        elif name == "@keys":
            if node.key is None:
                return None
            node = node.key
        else:
            found = node.fields.get(name)
            if found is None:
                # Every entry of an attribute map has the attribute type, whatever its name.
                if node.elem is _ATTRIBUTE:
                    node = _ATTRIBUTE
                    continue
                return None
            node = found
    return CostRange(0, node.max_elements)


def _device_type(path: tuple[str, ...] | None) -> CelType | None:
    """The type Kubernetes' checker gives a value reached from ``device`` along ``path`` (None
    within an attribute's value, where both checkers see ``dyn``)."""
    if not path or path[0] != "device":
        return None
    node: _Decl | None = _DEVICE
    for name in path[1:]:
        if node is None or node is _ATTRIBUTE:
            return None
        if node.fields:
            node = node.fields.get(name)
        elif name == "@keys":
            node = node.key
        else:
            node = node.elem  # an entry, by index or by field selection
    return node.type if node is not None else None


# ---------------------------------------------------------------------------
# The estimate (cel-go checker/cost.go's coster, with Kubernetes' estimators)


@dataclass(slots=True)
class _Entry:
    """cel-go's entrySizeEstimate: a list's or map's key/index and value sizes."""

    container: str  # list | map
    key: CostRange
    val: CostRange

    def union(self, other: _Entry | None) -> _Entry | None:
        if other is None:
            return None
        return _Entry(self.container, self.key.union(other.key), self.val.union(other.val))


@dataclass(slots=True)
class _Local:
    path: tuple[str, ...] | None
    size: CostRange | None
    entry: _Entry | None


@dataclass(slots=True)
class _Node:
    """cel-go's AstNode as estimators see it."""

    path: tuple[str, ...] | None
    type: CelType
    expr: Expr | None
    computed: CostRange | None


def _is_scalar(t: CelType) -> bool:
    if t.kind in ("bool", "double", "duration", "int", "timestamp", "uint"):
        return True
    return t.kind == "opaque" and t.name == "optional_type" and bool(t.params) and _is_scalar(t.params[0])


def _literal_size(e: Expr) -> CostRange | None:
    if e.kind == "literal":
        if e.literal == "string":
            return _fixed(len(e.value))
        if e.literal == "bytes":
            return _fixed(len(e.value))
        if e.literal in ("bool", "double", "duration", "int", "timestamp", "uint", "null"):
            return ONE
        return None
    if e.kind in ("list", "map"):
        return _fixed(len(e.args))
    return None


_STRING_ORDER = frozenset(
    {
        "less_string",
        "greater_string",
        "less_equals_string",
        "greater_equals_string",
        "less_bytes",
        "greater_bytes",
        "less_equals_bytes",
        "greater_equals_bytes",
        "equals",
        "not_equals",
    }
)


class _Coster:
    def __init__(self, checked: Checked) -> None:
        self.checked = checked
        self.paths: dict[int, tuple[str, ...] | None] = {}
        self.locals: dict[str, list[_Local]] = {}
        self.sizes: dict[int, CostRange] = {}
        self.entries: dict[int, _Entry] = {}

    # -- local variables

    def push(self, name: str, path: tuple[str, ...] | None, size: CostRange | None, entry: _Entry | None) -> None:
        self.locals.setdefault(name, []).append(_Local(path, size, entry))

    def pop(self, name: str) -> None:
        stack = self.locals.get(name)
        if stack:
            stack.pop()

    def peek(self, name: str) -> _Local | None:
        stack = self.locals.get(name)
        return stack[-1] if stack else None

    def _container(self, entry: _Entry | None, range_expr: Expr) -> str:
        return entry.container if entry is not None else self.type_of(range_expr).kind

    def push_iter_key(self, name: str, range_expr: Expr) -> None:
        entry = self.entry_size(range_expr)
        sub = "@indices" if self._container(entry, range_expr) == "list" else "@keys"
        self.push(name, _extend(self.path_of(range_expr), sub), entry.key if entry else None, None)

    def push_iter_value(self, name: str, range_expr: Expr) -> None:
        entry = self.entry_size(range_expr)
        sub = "@items" if self._container(entry, range_expr) == "list" else "@values"
        self.push(name, _extend(self.path_of(range_expr), sub), entry.val if entry else None, None)

    def push_iter_single(self, name: str, range_expr: Expr) -> None:
        entry = self.entry_size(range_expr)
        size = entry.key if entry else None
        sub = "@keys"
        if self._container(entry, range_expr) == "list":
            size = entry.val if entry else None
            sub = "@items"
        self.push(name, _extend(self.path_of(range_expr), sub), size, None)

    def push_local(self, name: str, e: Expr) -> None:
        self.push(name, self.path_of(e), self.compute_size(e), self.entry_size(e))

    # -- paths, types and sizes

    def local_of(self, e: Expr) -> _Local | None:
        """The local variable (bind, comprehension) an identifier names, if it names one."""
        return self.peek(e.name) if e.kind == "ident" else None

    def path_of(self, e: Expr) -> tuple[str, ...] | None:
        local = self.local_of(e)
        return local.path if local is not None else self.paths.get(e.id)

    def type_of(self, e: Expr) -> CelType:
        declared = _device_type(self.path_of(e))
        if declared is not None:
            return declared
        return self.checked.types.get(e.id, DYN)

    def node(self, e: Expr) -> _Node:
        path = self.path_of(e)
        if path and path[0] in _ACCUMULATORS:
            path = None  # only paths from root variables; not from accumulators
        return _Node(path, self.type_of(e), e, self.compute_size(e))

    def set_size(self, e: Expr, size: CostRange | None) -> None:
        if size is not None:
            self.sizes[e.id] = size

    def size_or_unknown(self, e: Expr | _Node) -> CostRange:
        size = self.compute_size(e) if isinstance(e, Expr) else e.computed
        return size if size is not None else UNKNOWN

    def copy_sizes(self, dst: Expr, src: Expr) -> None:
        self.set_size(dst, self.compute_size(src))
        entry = self.entry_size(src)
        if entry is not None:
            self.entries[dst.id] = entry

    def compute_size(self, e: Expr) -> CostRange | None:
        size = self.sizes.get(e.id)
        if size is not None:
            return size
        size = _literal_size(e)
        if size is not None:
            return size
        size = _device_size(self.path_of(e))
        if size is not None:
            self.sizes[e.id] = size
            return size
        if _is_scalar(self.type_of(e)):
            return ONE
        local = self.local_of(e)
        return local.size if local is not None else None

    def entry_size(self, e: Expr) -> _Entry | None:
        entry = self.entries.get(e.id)
        if entry is not None:
            return entry
        local = self.local_of(e)
        return local.entry if local is not None else None

    # -- costs

    def cost(self, e: Expr | None) -> CostRange:
        if e is None:
            return ZERO
        kind = e.kind
        if kind == "literal":
            return _fixed(CONST_COST)
        if kind == "ident":
            local = self.peek(e.name)
            self.paths[e.id] = local.path if local is not None else (e.name,)
            return _fixed(SELECT_AND_IDENT_COST)
        if kind == "select":
            return self.cost_select(e)
        if kind == "call":
            return self.cost_call(e)
        if kind == "list":
            return self.cost_list(e)
        if kind == "map":
            return self.cost_map(e)
        if kind == "struct":
            total = ZERO
            for value in e.args:
                total = total.add(self.cost(value))
            return total.add(_fixed(STRUCT_CREATE_BASE_COST))
        if kind == "comprehension":
            return self.cost_bind(e) if _is_bind(e) else self.cost_comprehension(e)
        return ZERO

    def cost_select(self, e: Expr) -> CostRange:
        operand = e.target
        assert operand is not None
        if e.test_only:
            # Kubernetes: checker.PresenceTestHasCost(false).
            return ZERO.add(self.cost(operand))
        total = self.cost(operand)
        if self.type_of(operand).kind in ("map", "struct", "type_param"):
            total = total.add(_fixed(SELECT_AND_IDENT_COST))
        self.paths[e.id] = _extend(self.path_of(operand), e.name)
        return total

    def cost_call(self, e: Expr) -> CostRange:
        if e.name == "dyn" and len(e.args) == 1:
            cost = self.cost(e.args[0])
            self.copy_sizes(e, e.args[0])
            return ONE.add(cost)
        args = e.args
        arg_costs = []
        arg_nodes = []
        for arg in args:
            arg_costs.append(self.cost(arg))
            arg_nodes.append(self.node(arg))
        overloads = self.overloads_of(e)
        if not overloads:
            return ZERO
        total = ZERO
        target: _Node | None = None
        if e.target is not None:
            total = total.add(self.cost(e.target))
            target = self.node(e.target)
        fn_cost = CostRange(MAX_UINT64, 0)
        result_size: CostRange | None = None
        for overload in overloads:
            cost, size = self.function_cost(e, overload, target, arg_nodes, arg_costs)
            fn_cost = fn_cost.union(cost)
            if size is not None:
                result_size = size if result_size is None else result_size.union(size)
            if overload in ("index_list", "index_map") and args:
                entry = self.entry_size(args[0])
                result_size = entry.val if entry is not None else None
                sub = "@items" if overload == "index_list" else "@values"
                self.paths[e.id] = _extend(self.path_of(args[0]), sub)
            if result_size is None:
                result_size = self.compute_size(e)
        self.set_size(e, result_size)
        return total.add(fn_cost)

    def overloads_of(self, e: Expr) -> list[str]:
        """The call's overloads as Kubernetes' checker resolves them: where this checker saw
        ``dyn`` and Kubernetes a declared map, only the map overloads; and no optional overloads
        for a value that is not optional."""
        found = self.checked.overloads.get(e.id, [])
        if len(found) < 2:
            return found
        operand: Expr | None = None
        if e.name in ("_[_]", "_[?_]", "size") and e.args:
            operand = e.args[0]
        elif e.name == "@in" and len(e.args) == 2:
            operand = e.args[1]
        if e.target is not None:
            operand = e.target
        if operand is None:
            return found
        operand_type = self.type_of(operand)
        kept = found
        if not (operand_type.kind == "opaque" and operand_type.name == "optional_type"):
            kept = [o for o in kept if not o.startswith("optional_")]
        declared = _device_type(self.path_of(operand))
        if declared is not None and declared.kind in ("map", "list"):
            other = "list" if declared.kind == "map" else "map"
            kept = [o for o in kept if other not in o.split("_")]
        return kept or found

    def cost_list(self, e: Expr) -> CostRange:
        total = ZERO
        item = CostRange(0 if not e.args else MAX_UINT64, 0)
        for element in e.args:
            total = total.add(self.cost(element))
            item = item.union(self.size_or_unknown(element))
        self.entries[e.id] = _Entry("list", ONE, item)
        return total.add(_fixed(LIST_CREATE_BASE_COST))

    def cost_map(self, e: Expr) -> CostRange:
        total = ZERO
        empty = not e.args
        key_size = CostRange(0 if empty else MAX_UINT64, 0)
        val_size = CostRange(0 if empty else MAX_UINT64, 0)
        for key, value in zip(e.keys, e.args, strict=True):
            if key is not None:
                total = total.add(self.cost(key))
            total = total.add(self.cost(value))
            if key is not None:
                key_size = key_size.union(self.size_or_unknown(key))
            val_size = val_size.union(self.size_or_unknown(value))
        self.entries[e.id] = _Entry("map", key_size, val_size)
        return total.add(_fixed(MAP_CREATE_BASE_COST))

    def cost_comprehension(self, e: Expr) -> CostRange:
        assert e.iter_range is not None and e.accu_init is not None
        total = self.cost(e.iter_range).add(self.cost(e.accu_init))
        self.push_local(e.accu_var, e.accu_init)
        if e.iter_var2:
            self.push_iter_key(e.iter_var, e.iter_range)
            self.push_iter_value(e.iter_var2, e.iter_range)
        else:
            self.push_iter_single(e.iter_var, e.iter_range)
        loop = self.cost(e.loop_condition)
        step = self.cost(e.loop_step)
        self.pop(e.iter_var)
        if e.iter_var2:
            self.pop(e.iter_var2)
        total = total.add(self.cost(e.result))
        self.pop(e.accu_var)
        count = self.size_or_unknown(e.iter_range)
        total = total.add(count.multiply(step.add(loop)))
        init = e.accu_init
        if init.kind == "literal":
            self.set_size(e, self.compute_size(init))
        elif init.kind in ("list", "map"):
            self.set_size(e, count)
            step_entry = self.entry_size(e.loop_step) if e.loop_step is not None else None
            if step_entry is not None:
                self.entries[e.id] = step_entry
        return total

    def cost_bind(self, e: Expr) -> CostRange:
        assert e.accu_init is not None and e.result is not None
        total = self.cost(e.iter_range).add(self.cost(e.accu_init))
        self.push_local(e.accu_var, e.accu_init)
        total = total.add(self.cost(e.result))
        self.pop(e.accu_var)
        self.copy_sizes(e, e.result)
        return total

    # -- calls

    def function_cost(
        self, e: Expr, overload: str, target: _Node | None, args: list[_Node], arg_costs: list[CostRange]
    ) -> tuple[CostRange, CostRange | None]:
        arg_sum = ZERO
        for c in arg_costs:
            arg_sum = arg_sum.add(c)
        estimated = self.kubernetes_call(e.name, overload, target, args)
        if estimated is not None:
            return estimated[0].add(arg_sum), estimated[1]
        if overload == "string_format" and target is not None:
            return self.size_or_unknown(target).by_factor(STRING_TRAVERSAL_COST_FACTOR).add(arg_sum), None
        if overload == "string_to_bytes" and len(args) == 1:
            sz = self.size_or_unknown(args[0])
            return sz.by_factor(STRING_TRAVERSAL_COST_FACTOR).add(arg_sum), CostRange(sz.min, _mul(sz.max, 4))
        if overload == "bytes_to_string" and len(args) == 1:
            sz = self.size_or_unknown(args[0])
            return sz.by_factor(STRING_TRAVERSAL_COST_FACTOR).add(arg_sum), CostRange(sz.min // 4, sz.max)
        if overload == "strings_quote" and len(args) == 1:
            sz = self.size_or_unknown(args[0])
            size = CostRange(_add(sz.min, 2), _add(_mul(sz.max, 2), 2))
            return sz.by_factor(STRING_TRAVERSAL_COST_FACTOR).add(arg_sum), size
        if overload in ("starts_with_string", "ends_with_string") and len(args) == 1:
            return self.size_or_unknown(args[0]).by_factor(STRING_TRAVERSAL_COST_FACTOR).add(arg_sum), None
        if overload == "in_list" and len(args) == 2:
            return self.size_or_unknown(args[1]).by_factor(1).add(arg_sum), None
        if overload in ("matches", "matches_string"):
            text: _Node | None = None
            regex: _Node | None = None
            if overload == "matches_string" and target is not None and len(args) == 1:
                text, regex = target, args[0]
            elif overload == "matches" and target is None and len(args) == 2:
                text, regex = args
            if text is not None and regex is not None:
                str_cost = self.size_or_unknown(text).add(ONE).by_factor(STRING_TRAVERSAL_COST_FACTOR)
                regex_cost = self.size_or_unknown(regex).by_factor(REGEX_STRING_LENGTH_COST_FACTOR)
                return str_cost.multiply(regex_cost).add(arg_sum), None
        if overload == "contains_string" and target is not None and len(args) == 1:
            str_cost = self.size_or_unknown(target).by_factor(STRING_TRAVERSAL_COST_FACTOR)
            sub_cost = self.size_or_unknown(args[0]).by_factor(STRING_TRAVERSAL_COST_FACTOR)
            return str_cost.multiply(sub_cost).add(arg_sum), None
        if overload in ("logical_or", "logical_and"):
            lhs, rhs = arg_costs[0], arg_costs[1]
            return CostRange(lhs.min, lhs.add(rhs).max), None
        if overload == "conditional":
            size = self.size_or_unknown(args[1]).union(self.size_or_unknown(args[2]))
            left = self.entry_size(e.args[1])
            joined = left.union(self.entry_size(e.args[2])) if left is not None else None
            if joined is not None:
                self.entries[e.id] = joined
            return arg_costs[0].add(arg_costs[1].union(arg_costs[2])), size
        if overload in ("add_string", "add_bytes", "add_list") and len(args) == 2:
            size = self.size_or_unknown(args[0]).add(self.size_or_unknown(args[1]))
            left = self.entry_size(e.args[0])
            joined = left.union(self.entry_size(e.args[1])) if left is not None else None
            if joined is not None:
                self.entries[e.id] = joined
            if overload == "add_list":
                return ONE.add(arg_sum), size
            return size.by_factor(STRING_TRAVERSAL_COST_FACTOR).add(arg_sum), size
        if overload in _STRING_ORDER:
            smallest = min(self.size_or_unknown(args[0]).max, self.size_or_unknown(args[1]).max)
            low = 1 if smallest > 0 else 0
            return CostRange(low, smallest).by_factor(STRING_TRAVERSAL_COST_FACTOR).add(arg_sum), None
        return ONE.add(arg_sum), None

    def kubernetes_call(
        self, function: str, overload: str, target: _Node | None, args: list[_Node]
    ) -> tuple[CostRange, CostRange | None] | None:
        """draCostEstimator, then library.CostEstimator (the functions Claimline declares)."""
        if function == "includes" and overload == "dra_includes_dyn_dyn" and target is not None:
            return CostRange(0, ATTRIBUTE_VALUES_PER_DEVICE).multiply(ONE), None
        if function in ("indexOf", "lastIndexOf", "includes") and target is not None:
            element = _list_element(target)
            if element is not None:
                el_cost = ONE
                if element.type.kind in ("string", "bytes"):
                    el_cost = el_cost.add(_size_estimate(element).by_factor(STRING_TRAVERSAL_COST_FACTOR))
                return _size_estimate(target).multiply(el_cost), None
            if function == "includes":
                return _size_estimate(target).multiply(ONE), None
            return _size_estimate(target).by_factor(STRING_TRAVERSAL_COST_FACTOR), None
        if function in ("lowerAscii", "upperAscii", "substring", "trim") and target is not None:
            sz = _size_estimate(target)
            return sz.by_factor(STRING_TRAVERSAL_COST_FACTOR), sz
        if function == "replace" and target is not None and len(args) >= 2:
            return _replace_estimate(_size_estimate(target), _size_estimate(args[0]), _size_estimate(args[1]))
        if function == "split" and target is not None:
            sz = _size_estimate(target)
            most = sz.max
            limit = args[1].expr if len(args) > 1 else None
            if limit is not None and limit.kind == "literal" and limit.literal == "int":
                most = limit.value % (1 << 64)
            return sz.by_factor(2 * STRING_TRAVERSAL_COST_FACTOR), CostRange(0, most)
        if function == "join" and target is not None:
            size = ZERO
            count = _size_estimate(target)
            element = _list_element(target)
            if element is not None:
                size = count.multiply(_size_estimate(element))
            if args:
                separators = CostRange(max(count.min - 1, 0), max(count.max - 1, 0))
                size = size.add(_size_estimate(args[0]).multiply(separators))
            return size.by_factor(STRING_TRAVERSAL_COST_FACTOR), size
        if function in ("find", "findAll") and target is not None and args:
            sz = _size_estimate(target)
            str_cost = sz.add(ONE).by_factor(STRING_TRAVERSAL_COST_FACTOR)
            regex_cost = _size_estimate(args[0]).by_factor(REGEX_STRING_LENGTH_COST_FACTOR)
            return str_cost.multiply(regex_cost), CostRange(0, sz.max)
        if function in ("quantity", "isQuantity", "semver", "isSemver") and args:
            return _size_estimate(args[0]).by_factor(STRING_TRAVERSAL_COST_FACTOR), None
        if function in (
            "sign",
            "asInteger",
            "isInteger",
            "asApproximateFloat",
            "isGreaterThan",
            "isLessThan",
            "compareTo",
            "add",
            "sub",
            "major",
            "minor",
            "patch",
        ):
            return ONE, None
        if function == "_==_" and len(args) == 2:
            left, right = args[0].type, args[1].type
            if left == right and left.kind == "struct" and left.name in _OBJECT_TYPES:
                return ONE, None
        return None


def _extend(path: tuple[str, ...] | None, name: str) -> tuple[str, ...]:
    return (*(path or ()), name)


def _is_bind(e: Expr) -> bool:
    r, cond = e.iter_range, e.loop_condition
    return (
        r is not None
        and r.kind == "list"
        and not r.args
        and cond is not None
        and cond.kind == "literal"
        and cond.literal == "bool"
        and cond.value is False
        and e.accu_var != "__result__"
    )


def _size_estimate(node: _Node) -> CostRange:
    """library.CostEstimator.sizeEstimate: computed, else declared, else unknown."""
    if node.computed is not None:
        return node.computed
    declared = _device_size(node.path)
    return declared if declared is not None else UNKNOWN


def _list_element(node: _Node) -> _Node | None:
    if not node.type.params:
        return None
    path = _extend(node.path, "@items") if node.path is not None else None
    return _Node(path, node.type.params[0], None, None)


def _replacements(text: int, empty: bool, no_growth: bool, each: int) -> tuple[int, int]:
    """One bound of library.CostEstimator's ``replace``: (replacements, characters retained)."""
    if empty:  # an empty string to replace surrounds every character with the replacement
        return (text + 1 if text < MAX_UINT64 else text), text
    if no_growth:  # the replacement is no longer than what it replaces: the text's own length
        return 0, text
    return min(math.ceil(text / each), MAX_UINT64), 0


def _replace_estimate(
    sz: CostRange, to_replace: CostRange, replace_with: CostRange
) -> tuple[CostRange, CostRange | None]:
    most, retained_most = _replacements(sz.max, to_replace.min == 0, replace_with.max <= to_replace.min, to_replace.min)
    least, retained_least = _replacements(
        sz.min, to_replace.max == 0, to_replace.max <= replace_with.min, to_replace.max
    )
    size = CostRange(least, most).multiply(replace_with).add(CostRange(retained_least, retained_most))
    return sz.by_factor(2 * STRING_TRAVERSAL_COST_FACTOR), size


def estimate_cost(checked: Checked) -> CostRange:
    """The estimated cost of evaluating the checked selector, as Kubernetes estimates it."""
    return _Coster(checked).cost(checked.expr)

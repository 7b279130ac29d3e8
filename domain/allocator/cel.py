"""Evaluate DRA device selectors (CEL) the way Kubernetes does.

Follows k8s.io/dynamic-resource-allocation/cel (compile.go) on top of the CEL
C++ runtime (``cel-expr-python``):

* ``device.driver``, ``device.allowMultipleAllocations``, ``device.attributes``
  and ``device.capacity``; the last two map domain -> name -> value, with
  unqualified names placed in the driver's domain, and an unknown domain
  reading as an empty map.
* The Kubernetes ``quantity()`` and ``semver()`` libraries, ``includes()``,
  ``find()``/``findAll()``, the strings extension (version 2), ``cel.bind``
  and optional types.

cel-expr-python cannot carry opaque Python objects through CEL, nor check
custom types in Python-defined functions. So every expression is compiled
twice: once by a *checker* environment, declared from YAML with proper
``kubernetes.Quantity``/``kubernetes.Semver`` types, which gives Kubernetes'
compile errors; and once by a *runtime* environment whose functions take
``dyn`` and are implemented in Python. At run time a quantity or semver is a
one-entry map ``{"kubernetes.Quantity": "<nanos>"}`` whose value is
canonical, so CEL's own ``==`` compares them numerically. Where the checker
cannot see the type (attribute values are ``dyn``), that map shows through:
``size()``, ``in`` and macros on a quantity or semver act on the map instead
of failing as in Kubernetes.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from cel_expr_python import cel as _cel
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings

from domain.cluster.quantity import DECIMAL_EXPONENT, Quantity, QuantityError
from domain.cluster.semver import Semver, SemverError

__all__ = [
    "CompiledSelector",
    "Device",
    "SelectorCompileError",
    "SelectorEvaluationError",
    "compile_selector",
]

QUANTITY_TYPE = "kubernetes.Quantity"
SEMVER_TYPE = "kubernetes.Semver"

# Limits from k8s.io/api/resource/v1.
SELECTOR_MAX_LENGTH = 10 * 1024
ATTRIBUTE_VALUES_MAX = 48

DEVICE_FIELDS = frozenset({"driver", "attributes", "capacity", "allowMultipleAllocations"})

# Each retry fills in one more domain that the expression looked up but the
# device lacks (see CompiledSelector.matches).
_MAX_DOMAIN_RETRIES = 8


class SelectorCompileError(ValueError):
    """The expression is not a valid DRA selector."""


class SelectorEvaluationError(ValueError):
    """Evaluating the selector against one device failed."""


class _NoSuchOverload(Exception):
    pass


# ---------------------------------------------------------------------------
# Runtime representation of quantities and semvers


def _encode_quantity(q: Quantity) -> dict[str, str]:
    return {QUANTITY_TYPE: str(q.nanos)}


def _encode_semver(v: Semver) -> dict[str, str]:
    return {SEMVER_TYPE: v.core_string()}


@functools.lru_cache(maxsize=8192)
def _quantity_from_nanos(nanos: str) -> Quantity:
    return Quantity(int(nanos))


@functools.lru_cache(maxsize=8192)
def _capacity_value(raw: str) -> dict[str, str]:
    return _encode_quantity(Quantity.parse(raw))


@functools.lru_cache(maxsize=8192)
def _version_value(raw: str) -> dict[str, str]:
    return _encode_semver(Semver.parse(raw))


def _as_quantity(value: Any) -> Quantity | None:
    if type(value) is dict and len(value) == 1 and QUANTITY_TYPE in value:
        return _quantity_from_nanos(value[QUANTITY_TYPE])
    return None


def _as_semver(value: Any) -> Semver | None:
    if type(value) is dict and len(value) == 1 and SEMVER_TYPE in value:
        return Semver.parse(value[SEMVER_TYPE])
    return None


def _type_name(value: Any) -> str:
    if type(value) is dict and len(value) == 1:
        for marker in (QUANTITY_TYPE, SEMVER_TYPE):
            if marker in value:
                return marker
    return {
        bool: "bool",
        int: "int",
        float: "double",
        str: "string",
        bytearray: "bytes",
        bytes: "bytes",
        list: "list",
        dict: "map",
        type(None): "null_type",
    }.get(type(value), type(value).__name__)


# ---------------------------------------------------------------------------
# Library functions (Python side of the runtime environment)


def _quantity_arg(value: Any, function: str) -> Quantity:
    q = _as_quantity(value)
    if q is None:
        raise _NoSuchOverload(f"no such overload: {function}({_type_name(value)})")
    return q


def _comparable(a: Any, b: Any, function: str) -> int:
    qa, qb = _as_quantity(a), _as_quantity(b)
    if qa is not None and qb is not None:
        return qa.compare(qb)
    sa, sb = _as_semver(a), _as_semver(b)
    if sa is not None and sb is not None:
        return sa.compare(sb)
    raise _NoSuchOverload(f"no such overload: {_type_name(a)}.{function}({_type_name(b)})")


def _fn_quantity(s: str) -> dict[str, str]:
    return _encode_quantity(Quantity.parse(s))


def _fn_is_quantity(s: str) -> bool:
    return Quantity.is_valid(s)


def _fn_sign(q: Any) -> int:
    return _quantity_arg(q, "sign").sign()


def _fn_is_greater_than(a: Any, b: Any) -> bool:
    return _comparable(a, b, "isGreaterThan") == 1


def _fn_is_less_than(a: Any, b: Any) -> bool:
    return _comparable(a, b, "isLessThan") == -1


def _fn_compare_to(a: Any, b: Any) -> int:
    return _comparable(a, b, "compareTo")


def _fn_as_approximate_float(q: Any) -> float:
    return _quantity_arg(q, "asApproximateFloat").as_approximate_float()


def _fn_as_integer(q: Any) -> int:
    return _quantity_arg(q, "asInteger").as_integer()


def _fn_is_integer(q: Any) -> bool:
    return _quantity_arg(q, "isInteger").is_integer()


def _arith(a: Any, b: Any, function: str) -> dict[str, str]:
    q = _quantity_arg(a, function)
    other = Quantity.from_int(b, DECIMAL_EXPONENT) if type(b) is int else _as_quantity(b)
    if other is None:
        raise _NoSuchOverload(f"no such overload: {QUANTITY_TYPE}.{function}({_type_name(b)})")
    return _encode_quantity(q.add(other) if function == "add" else q.sub(other))


def _fn_add(a: Any, b: Any) -> dict[str, str]:
    return _arith(a, b, "add")


def _fn_sub(a: Any, b: Any) -> dict[str, str]:
    return _arith(a, b, "sub")


def _fn_semver(s: str, normalize: bool = False) -> dict[str, str]:
    return _encode_semver(Semver.parse(s, normalize=normalize))


def _fn_is_semver(s: str, normalize: bool = False) -> bool:
    return Semver.is_valid(s, normalize=normalize)


def _semver_arg(value: Any, function: str) -> Semver:
    v = _as_semver(value)
    if v is None:
        raise _NoSuchOverload(f"no such overload: {_type_name(value)}.{function}()")
    return v


def _fn_major(v: Any) -> int:
    return _semver_arg(v, "major").major


def _fn_minor(v: Any) -> int:
    return _semver_arg(v, "minor").minor


def _fn_patch(v: Any) -> int:
    return _semver_arg(v, "patch").patch


def _cel_equal(a: Any, b: Any) -> bool:
    """CEL's heterogeneous equality on the Python form of two values."""
    if type(a) is bool or type(b) is bool:
        return type(a) is type(b) and a == b
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_cel_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_cel_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _fn_includes(target: Any, arg: Any) -> bool:
    if isinstance(target, list):
        for i, item in enumerate(target):
            if i >= ATTRIBUTE_VALUES_MAX:
                raise ValueError(
                    f"'includes' function cannot be applied to lists longer than {ATTRIBUTE_VALUES_MAX} values"
                )
            if _cel_equal(item, arg):
                return True
        return False
    return _cel_equal(target, arg)


@functools.lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as e:
        raise ValueError(f"Illegal regex: {e}") from None


def _fn_find(s: str, pattern: str) -> str:
    m = _regex(pattern).search(s)
    return m.group(0) if m else ""


def _fn_find_all(s: str, pattern: str, n: int = -1) -> list[str]:
    if n == 0:
        return []
    found = []
    for m in _regex(pattern).finditer(s):
        found.append(m.group(0))
        if len(found) == n:
            break
    return found


# ---------------------------------------------------------------------------
# Declarations: (function, overload id, receiver type or None, arg types, result, impl)

_Q = QUANTITY_TYPE
_S = SEMVER_TYPE
_LIST_STRING = ("list", "string")

_Decl = tuple[str, str, str | None, tuple[Any, ...], Any, Callable[..., Any]]

_DECLS: tuple[_Decl, ...] = (
    ("quantity", "string_to_quantity", None, ("string",), _Q, _fn_quantity),
    ("isQuantity", "is_quantity_string", None, ("string",), "bool", _fn_is_quantity),
    # Kubernetes declares sign() as a global function, so `q.sign()` does not compile.
    ("sign", "quantity_sign", None, (_Q,), "int", _fn_sign),
    ("isGreaterThan", "quantity_is_greater_than", _Q, (_Q,), "bool", _fn_is_greater_than),
    ("isLessThan", "quantity_is_less_than", _Q, (_Q,), "bool", _fn_is_less_than),
    ("compareTo", "quantity_compare_to", _Q, (_Q,), "int", _fn_compare_to),
    ("asApproximateFloat", "quantity_get_float", _Q, (), "double", _fn_as_approximate_float),
    ("asInteger", "quantity_get_int", _Q, (), "int", _fn_as_integer),
    ("isInteger", "quantity_is_integer", _Q, (), "bool", _fn_is_integer),
    ("add", "quantity_add", _Q, (_Q,), _Q, _fn_add),
    ("add", "quantity_add_int", _Q, ("int",), _Q, _fn_add),
    ("sub", "quantity_sub", _Q, (_Q,), _Q, _fn_sub),
    ("sub", "quantity_sub_int", _Q, ("int",), _Q, _fn_sub),
    ("semver", "string_to_semver", None, ("string",), _S, _fn_semver),
    ("semver", "string_bool_to_semver", None, ("string", "bool"), _S, _fn_semver),
    ("isSemver", "is_semver_string", None, ("string",), "bool", _fn_is_semver),
    ("isSemver", "is_semver_string_bool", None, ("string", "bool"), "bool", _fn_is_semver),
    ("isGreaterThan", "semver_is_greater_than", _S, (_S,), "bool", _fn_is_greater_than),
    ("isLessThan", "semver_is_less_than", _S, (_S,), "bool", _fn_is_less_than),
    ("compareTo", "semver_compare_to", _S, (_S,), "int", _fn_compare_to),
    ("major", "semver_major", _S, (), "int", _fn_major),
    ("minor", "semver_minor", _S, (), "int", _fn_minor),
    ("patch", "semver_patch", _S, (), "int", _fn_patch),
    ("includes", "dra_includes_dyn_dyn", "dyn", ("dyn",), "bool", _fn_includes),
    ("find", "string_find_string", "string", ("string",), "string", _fn_find),
    ("findAll", "string_find_all_string", "string", ("string",), _LIST_STRING, _fn_find_all),
    ("findAll", "string_find_all_string_int", "string", ("string", "int"), _LIST_STRING, _fn_find_all),
)


def _type_info(t: Any) -> dict[str, Any]:
    if isinstance(t, tuple):
        return {"type_name": t[0], "params": [_type_info(p) for p in t[1:]]}
    return {"type_name": t}


def _checker_config_yaml() -> str:
    functions: dict[str, list[dict[str, Any]]] = {}
    for name, overload_id, target, args, result, _impl in _DECLS:
        overload: dict[str, Any] = {"id": overload_id}
        if target is not None:
            overload["target"] = _type_info(target)
        overload["args"] = [_type_info(a) for a in args]
        overload["return"] = _type_info(result)
        functions.setdefault(name, []).append(overload)
    config = {
        "name": "dra-selector",
        "variables": [
            {"name": "device", "type_name": "map", "params": [{"type_name": "string"}, {"type_name": "dyn"}]}
        ],
        "functions": [{"name": name, "overloads": overloads} for name, overloads in functions.items()],
    }
    return yaml.safe_dump(config, sort_keys=False)


def _runtime_type(t: Any) -> _cel.Type:
    if t in (_Q, _S, "dyn"):
        return _cel.Type.DYN
    if isinstance(t, tuple):
        return _cel.Type.List(_runtime_type(t[1]))
    return {
        "string": _cel.Type.STRING,
        "bool": _cel.Type.BOOL,
        "int": _cel.Type.INT,
        "double": _cel.Type.DOUBLE,
    }[t]


def _cross_type_comparisons() -> _cel.CelExtension:
    # Kubernetes enables cel.CrossTypeNumericComparisons; the C++ runtime already
    # compares int/uint/double, only the checker needs the extra overloads.
    names = {"_<_": "less", "_<=_": "less_equals", "_>_": "greater", "_>=_": "greater_equals"}
    kinds = {"int64": _cel.Type.INT, "uint64": _cel.Type.UINT, "double": _cel.Type.DOUBLE}
    decls = []
    for function, prefix in names.items():
        overloads = [
            _cel.Overload(f"{prefix}_{a}_{b}", _cel.Type.BOOL, [kinds[a], kinds[b]])
            for a in kinds
            for b in kinds
            if a != b
        ]
        decls.append(_cel.FunctionDecl(function, overloads))
    return _cel.CelExtension("k8s_cross_type_numeric_comparisons", decls)


def _standard_extensions() -> list[_cel.CelExtensionBase]:
    return [ext_strings.ExtStrings(2), ext_bindings.ExtBindings(), ext_optional.ExtOptional()]


@functools.cache
def _checker_env() -> _cel.Env:
    config = _cel.NewEnvConfigFromYaml(_checker_config_yaml())
    return _cel.NewEnv(config=config, extensions=[*_standard_extensions(), _cross_type_comparisons()])


@functools.cache
def _runtime_env() -> _cel.Env:
    by_name: dict[str, list[_cel.Overload]] = {}
    seen: set[tuple[str, bool, int]] = set()
    for name, overload_id, target, args, result, impl in _DECLS:
        # Overloads only differing in checked types share one dyn-typed runtime overload.
        key = (name, target is not None, len(args))
        if key in seen:
            continue
        seen.add(key)
        params = ([_runtime_type(target)] if target is not None else []) + [_runtime_type(a) for a in args]
        by_name.setdefault(name, []).append(
            _cel.Overload(
                f"dra_runtime_{overload_id}",
                _runtime_type(result),
                params,
                is_member=target is not None,
                impl=impl,
            )
        )
    library = _cel.CelExtension(
        "k8s_dra_runtime", [_cel.FunctionDecl(name, overloads) for name, overloads in by_name.items()]
    )
    return _cel.NewEnv(variables={"device": _cel.Type.DYN}, extensions=[*_standard_extensions(), library])


# ---------------------------------------------------------------------------
# Devices


class _DeviceInput:
    """The CEL variables for one device, built once and cached on the Device."""

    __slots__ = ("attribute_domains", "capacity_domains", "data", "error")

    def __init__(self, device: Device) -> None:
        self.error: str | None = None
        self.data: dict[str, Any] = {}
        self.attribute_domains: frozenset[str] = frozenset()
        self.capacity_domains: frozenset[str] = frozenset()
        try:
            attributes = _by_domain(device.driver, device.attributes, _attribute_value, "attribute")
            capacity = _by_domain(device.driver, device.capacity, _capacity_entry, "capacity")
        except SelectorEvaluationError as e:
            self.error = str(e)
            return
        self.attribute_domains = frozenset(attributes)
        self.capacity_domains = frozenset(capacity)
        self.data = {
            "device": {
                "driver": device.driver,
                "allowMultipleAllocations": bool(device.allow_multiple_allocations),
                "attributes": attributes,
                "capacity": capacity,
            }
        }

    def with_empty_domains(self, domains: Iterable[str]) -> dict[str, Any]:
        dev = dict(self.data["device"])
        attributes = dict(dev["attributes"])
        capacity = dict(dev["capacity"])
        for domain in domains:
            attributes.setdefault(domain, {})
            capacity.setdefault(domain, {})
        dev["attributes"] = attributes
        dev["capacity"] = capacity
        return {"device": dev}


def _split_qualified_name(name: str, default_domain: str) -> tuple[str, str]:
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (default_domain, name)


def _by_domain(
    driver: str,
    raw: Mapping[str, Any],
    convert: Callable[[Any], Any],
    kind: str,
) -> dict[str, dict[str, Any]]:
    result: dict[str, dict[str, Any]] = {}
    for name, value in raw.items():
        try:
            converted = convert(value)
        except (QuantityError, SemverError, TypeError, ValueError) as e:
            raise SelectorEvaluationError(f"{kind} {name}: {e}") from None
        domain, ident = _split_qualified_name(name if isinstance(name, str) else str(name), driver)
        result.setdefault(domain, {})[ident] = converted
    return result


def _attribute_value(attr: Any) -> Any:
    if type(attr) is dict and len(attr) == 1:
        # The usual shape, e.g. {"string": "A100"}.
        [(kind, value)] = attr.items()
        convert = _SCALAR_ATTRIBUTES.get(kind)
        if convert is not None and value is not None:
            return convert(value)
        lists = _LIST_ATTRIBUTES.get(kind)
        if lists is not None and value is not None:
            return [lists(v) for v in value]
    if not isinstance(attr, Mapping):
        raise ValueError("unsupported attribute value")
    # Same precedence as getAttributeValue in compile.go.
    for kind, convert in _LIST_ATTRIBUTES.items():
        if attr.get(kind) is not None:
            return [convert(v) for v in attr[kind]]
    for kind, convert in _SCALAR_ATTRIBUTES.items():
        if attr.get(kind) is not None:
            return convert(attr[kind])
    raise ValueError("unsupported attribute value")


def _int64(v: Any) -> int:
    if type(v) is not int or not -(2**63) <= v < 2**63:
        raise ValueError(f"not an int64: {v!r}")
    return int(v)


def _bool(v: Any) -> bool:
    if type(v) is not bool:
        raise ValueError(f"not a bool: {v!r}")
    return v


def _string(v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError(f"not a string: {v!r}")
    return v


def _version(v: Any) -> dict[str, str]:
    try:
        return _version_value(_string(v))
    except SemverError as e:
        raise ValueError(f"parse semantic version: {e}") from None


_LIST_ATTRIBUTES: dict[str, Callable[[Any], Any]] = {
    "ints": _int64,
    "bools": _bool,
    "strings": _string,
    "versions": _version,
}
_SCALAR_ATTRIBUTES: dict[str, Callable[[Any], Any]] = {
    "int": _int64,
    "bool": _bool,
    "string": _string,
    "version": _version,
}


def _capacity_entry(cap: Any) -> dict[str, str]:
    if isinstance(cap, Mapping):
        cap = cap.get("value")
    if isinstance(cap, Quantity):
        return _encode_quantity(cap)
    if isinstance(cap, int) and type(cap) is not bool:
        cap = str(cap)
    return _capacity_value(_string(cap))


@dataclass(frozen=True)
class Device:
    """One device as a ResourceSlice advertises it (resource.k8s.io/v1).

    ``attributes`` and ``capacity`` are the raw maps of ``spec.devices[]``, e.g.
    ``{"productName": {"string": "A100"}}`` and ``{"memory": {"value": "40Gi"}}``.
    """

    driver: str
    attributes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    capacity: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    allow_multiple_allocations: bool = False
    _input: _DeviceInput | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def from_slice_entry(cls, driver: str, device: Mapping[str, Any]) -> Device:
        """Build from a ``spec.devices[]`` entry of a ResourceSlice."""
        body: Mapping[str, Any] = device
        if "attributes" not in device and "capacity" not in device and isinstance(device.get("basic"), Mapping):
            body = device["basic"]  # v1beta1 layout
        return cls(
            driver=driver,
            attributes=body.get("attributes") or {},
            capacity=body.get("capacity") or {},
            allow_multiple_allocations=bool(body.get("allowMultipleAllocations", False)),
        )

    def projection(self, refs: Iterable[tuple[str, str, str]]) -> list[Any]:
        """All that a selector reading only ``refs`` (``(kind, domain, name)``: an attribute or a
        capacity by domain and name) can see of this device: devices equal in it get the same
        answer, error included, from such a selector.

        That is the driver, whether the device converts at all, and per reference the raw
        entries CEL could read it from (the driver's own domain answers unqualified names) and
        whether the domain exists, since an absent domain reads as an empty map.
        """
        prepared = self._cel_input()
        seen: list[Any] = [self.driver, prepared.error]
        for kind, domain, name in refs:
            raw = self.capacity if kind == "capacity" else self.attributes
            seen.append(
                [
                    kind,
                    domain,
                    name,
                    domain in prepared.attribute_domains,
                    domain in prepared.capacity_domains,
                    raw.get(name) if domain == self.driver else None,
                    raw.get(f"{domain}/{name}"),
                ]
            )
        return seen

    def _cel_input(self) -> _DeviceInput:
        cached = self._input
        if cached is None:
            cached = _DeviceInput(self)
            object.__setattr__(self, "_input", cached)
        return cached


# ---------------------------------------------------------------------------
# Compilation and evaluation

_STATUS_PREFIX = re.compile(r"^[A-Z_]+: ")
_STATUS_SUFFIX = re.compile(r" \[[A-Z_]+\]$")
_MISSING_KEY = re.compile(r'Key not found in map : "((?:[^"\\]|\\.)*)"$')
_MISSING_KEY_ANY = re.compile(r"Key not found in map : (.*)$", re.DOTALL)
_NO_OVERLOAD = re.compile(r"No matching overloads found : (.*)$", re.DOTALL)


def _compile_message(error: Exception) -> str:
    text = _STATUS_SUFFIX.sub("", _STATUS_PREFIX.sub("", str(error).strip()))
    return "compilation failed: " + text


def _runtime_message(raw: str) -> str:
    text = _STATUS_PREFIX.sub("", raw.strip())
    m = _MISSING_KEY.search(text)
    if m:
        return f"no such key: {m.group(1)}"
    m = _MISSING_KEY_ANY.search(text)
    if m:
        return f"no such key: {m.group(1)}"
    m = _NO_OVERLOAD.search(text)
    if m:
        if m.group(1).startswith("<iter_range>"):
            return "expected iterable type (list or map)"  # a macro applied to a scalar
        return f"no such overload: {m.group(1)}"
    return text


_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _could_be_domain(key: str, driver: str) -> bool:
    # Attribute and capacity names are C identifiers, domains are DNS subdomains:
    # only a dot-less domain other than the driver's is ambiguous, and that is
    # treated as a missing name (one evaluation instead of two).
    return "." in key or key == driver or _C_IDENTIFIER.fullmatch(key) is None


def _missing_key(raw: str) -> str | None:
    m = _MISSING_KEY.search(raw)
    if m is None or "\\" in m.group(1):
        return None
    return m.group(1)


def _undefined_device_fields(expression: str) -> list[tuple[int, str]]:
    """``device.<name>`` selections of unknown fields, outside string literals and comments.

    The checker sees ``device`` as a map, so this restores the compile error that
    Kubernetes reports for its object type.
    """
    found = []
    i, n = 0, len(expression)
    while i < n:
        c = expression[i]
        if c in "\"'":
            prefix_start = i
            while prefix_start > 0 and expression[prefix_start - 1] in "rRbB":
                prefix_start -= 1
            raw = "r" in expression[prefix_start:i].lower()
            quote = expression[i : i + 3] if expression[i : i + 3] in ('"""', "'''") else c
            i += len(quote)
            while i < n and not expression.startswith(quote, i):
                i += 2 if expression[i] == "\\" and not raw else 1
            i += len(quote)
            continue
        if expression.startswith("//", i):
            end = expression.find("\n", i)
            i = n if end < 0 else end + 1
            continue
        m = _C_IDENTIFIER.match(expression, i)
        if m is None:
            i += 1
            continue
        j = m.end()
        if m.group(0) == "device" and (i == 0 or expression[i - 1] != "."):
            k = j
            while k < n and expression[k].isspace():
                k += 1
            if k < n and expression[k] == "." and not expression.startswith("..", k):
                k += 1
                while k < n and expression[k].isspace():
                    k += 1
                name = _C_IDENTIFIER.match(expression, k)
                if name and name.group(0) not in DEVICE_FIELDS:
                    found.append((k, name.group(0)))
        i = j
    return found


def _position(expression: str, offset: int) -> str:
    line = expression.count("\n", 0, offset) + 1
    column = offset - (expression.rfind("\n", 0, offset) + 1) + 1
    return f"<input>:{line}:{column}"


class CompiledSelector:
    """A compiled selector; use ``compile_selector`` to get one (it is cached)."""

    __slots__ = ("_program", "expression")

    def __init__(self, expression: str, program: _cel.Expression) -> None:
        self.expression = expression
        self._program = program

    def __repr__(self) -> str:
        return f"CompiledSelector({self.expression!r})"

    def matches(self, device: Device) -> bool:
        """Whether the device is selected; raises SelectorEvaluationError on a CEL runtime error."""
        prepared = device._cel_input()
        if prepared.error is not None:
            raise SelectorEvaluationError(prepared.error)
        value, is_error = self._eval(prepared.data)
        filled: list[str] = []
        while is_error and len(filled) < _MAX_DOMAIN_RETRIES:
            # Kubernetes reads an absent domain as an empty map; the C++ runtime
            # fails the lookup instead, so retry with that domain present but
            # empty. Key lookups then behave exactly as in Kubernetes; only `in`,
            # size() and iteration over device.attributes/capacity could differ,
            # and only in an expression that also looks up the absent domain.
            key = _missing_key(value)
            if (
                key is None
                or key in filled
                or (key in prepared.attribute_domains and key in prepared.capacity_domains)
                or not _could_be_domain(key, device.driver)
            ):
                break
            filled.append(key)
            value, is_error = self._eval(prepared.with_empty_domains(filled))
        if is_error:
            raise SelectorEvaluationError(_runtime_message(value))
        if type(value) is not bool:
            raise SelectorEvaluationError(f"expression must evaluate to bool, got {_type_name(value)}")
        return value

    def _eval(self, data: dict[str, Any]) -> tuple[Any, bool]:
        try:
            result = self._program.eval(data=data)
        except RuntimeError as e:  # conversion problems surface as exceptions
            raise SelectorEvaluationError(_runtime_message(str(e))) from None
        value = result.value()
        if type(value) is bool:
            return value, False
        if result.type() == _cel.Type.ERROR:
            return value, True
        return result.plain_value(), False


@functools.lru_cache(maxsize=1024)
def compile_selector(expression: str) -> CompiledSelector:
    """Compile a DRA selector expression; raises SelectorCompileError."""
    if not isinstance(expression, str):
        raise SelectorCompileError(f"expression must be a string, not {type(expression).__name__}")
    size = len(expression.encode())
    if size > SELECTOR_MAX_LENGTH:
        raise SelectorCompileError(f"expression too long: {size} bytes, at most {SELECTOR_MAX_LENGTH}")
    try:
        checked = _checker_env().compile(expression)
    except RuntimeError as e:
        raise SelectorCompileError(_compile_message(e)) from None
    output = checked.return_type()
    if output != _cel.Type.BOOL and output != _cel.Type.DYN:
        raise SelectorCompileError(f"must evaluate to bool or the unknown type, not {_checked_type_name(output)}")
    undefined = _undefined_device_fields(expression)
    if undefined:
        offset, name = undefined[0]
        raise SelectorCompileError(
            f"compilation failed: ERROR: {_position(expression, offset)}: undefined field '{name}'"
        )
    try:
        program = _runtime_env().compile(expression, disable_check=True)
    except RuntimeError as e:
        raise SelectorCompileError(_compile_message(e)) from None
    return CompiledSelector(expression, program)


def _checked_type_name(t: _cel.Type) -> str:
    name = str(t.name())
    return name if "." in name else name.lower()

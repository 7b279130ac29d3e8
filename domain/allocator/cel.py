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

Regular expressions are RE2's, as Go's regexp is for Kubernetes: linear in the text, no
backreferences or lookaround. ``matches()`` is the C++ runtime's (RE2 already); ``find()`` and
``findAll()`` use google-re2 with Go's ``FindString``/``FindAllString`` semantics. A literal pattern
that is no RE2 does not compile, with Kubernetes' message; a computed one fails on the device.

Each compiled selector carries Kubernetes' estimate of its worst-case cost (``cel_cost``). The
C++ runtime cannot count cost as it goes, so a selector estimated over ``COST_LIMIT`` (which the
API server refuses to store) fails on every device with the scheduler's "actual cost limit
exceeded" instead of running: the same answer wherever Kubernetes' actual cost reaches the limit,
which is where the estimate is tight; a stored selector whose estimate is over the limit but whose
actual cost would stay under it (Kubernetes estimates ``["a", "b"].join(",")`` at 2^64/10) errs here
and not there. ``evaluation_budget`` bounds the CPU time of evaluations (``limits``).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import re
import struct
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import re2
import yaml
from cel_expr_python import cel as _cel
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings

from domain.allocator.cel_cost import COST_LIMIT, Checked, estimate_cost, parse_checked
from domain.cluster.quantity import DECIMAL_EXPONENT, Quantity, QuantityError
from domain.cluster.semver import Semver, SemverError

__all__ = [
    "COST_LIMIT",
    "CompiledSelector",
    "Device",
    "EvaluationBudget",
    "SelectorCompileError",
    "SelectorCostError",
    "SelectorEvaluationError",
    "SelectorLimitExceeded",
    "SelectorTimeLimit",
    "compile_selector",
    "evaluation_budget",
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


class SelectorCostError(SelectorCompileError):
    """The selector's estimated cost exceeds Kubernetes' limit: the API server rejects it."""


class SelectorEvaluationError(ValueError):
    """Evaluating the selector against one device failed."""


class SelectorLimitExceeded(Exception):
    """Evaluation went past a limit the caller set for all of it (time, memory): not an answer
    about one device, so it stops everything that was being evaluated."""


class SelectorTimeLimit(SelectorLimitExceeded):
    """Evaluating selectors took more time than the budget allows."""


class EvaluationBudget:
    """How much CPU time CEL evaluation may take, summed over every evaluation made while it is
    current (``evaluation_budget``): checked before each one, so an evaluation begun in time
    finishes. CPU time of the evaluating thread, not wall-clock time: what the selector costs,
    whatever else the machine is doing.

    ``shared``, when given, mirrors the CPU seconds spent and, during an evaluation, the process's
    CPU time when it began (two doubles), for another process to watch.
    """

    __slots__ = ("seconds", "shared", "spent")

    def __init__(self, seconds: float, shared: Any = None) -> None:
        self.seconds = seconds
        self.spent = 0.0
        self.shared = shared

    def begin(self) -> float:
        if self.spent > self.seconds:
            raise SelectorTimeLimit(f"the selector took more than {self.seconds:g} s of CPU time to evaluate")
        if self.shared is not None:
            struct.pack_into("dd", self.shared, 0, self.spent, time.process_time())
        return time.thread_time()

    def end(self, started: float) -> None:
        self.spent += time.thread_time() - started
        if self.shared is not None:
            struct.pack_into("dd", self.shared, 0, self.spent, 0.0)


_BUDGET: contextvars.ContextVar[EvaluationBudget | None] = contextvars.ContextVar("cel_budget", default=None)


@contextlib.contextmanager
def evaluation_budget(seconds: float, shared: Any = None) -> Iterator[EvaluationBudget]:
    """Evaluations inside may take ``seconds`` of CPU time in all; past that the next one raises
    SelectorTimeLimit."""
    budget = EvaluationBudget(seconds, shared)
    token = _BUDGET.set(budget)
    try:
        yield budget
    finally:
        _BUDGET.reset(token)


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


# Regular expressions: RE2 (google-re2), as Go's regexp that Kubernetes uses is: linear in the
# text, no backreferences or lookaround. The C++ runtime's matches() is RE2 already; find() and
# findAll() are Claimline's and run here.

# RE2's error codes, as Go's regexp/syntax words them ("error parsing regexp: <code>: `<arg>`").
_GO_REGEXP_ERRORS = {
    "invalid escape sequence": "invalid escape sequence",
    "invalid character class": "invalid character class",
    "invalid character class range": "invalid character class range",
    "missing ]": "missing closing ]",
    "missing )": "missing closing )",
    "unexpected )": "unexpected )",
    "trailing \\": "trailing backslash at end of expression",
    "no argument for repetition operator": "missing argument to repetition operator",
    "invalid repetition size": "invalid repeat count",
    "bad repetition operator": "invalid nested repetition operator",
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "invalid UTF-8": "invalid UTF-8",
    "invalid named capture group": "invalid named capture",
    "pattern too large - compile failed": "expression too large",
    "pattern too large - reverse compile failed": "expression too large",
}


def regexp_error(re2_message: str, pattern: str) -> str:
    """An RE2 error message (``missing ): (``) in the words of Go's regexp, which Kubernetes reports:
    ``error parsing regexp: missing closing ): `(```."""
    code, sep, arg = re2_message.partition(": ")
    if code not in _GO_REGEXP_ERRORS:
        code, arg = re2_message, pattern
    elif not sep:
        arg = ""
    return f"error parsing regexp: {_GO_REGEXP_ERRORS.get(code, code)}: `{arg}`"


class RegexpError(ValueError):
    """The pattern is not an RE2 (Go regexp) expression; the message is Go's."""


@functools.lru_cache(maxsize=1)
def _re2_options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # errors are reported, not logged to stderr
    return options


def _go_only_errors(pattern: str, re2_message: str | None) -> str | None:
    """Where Go's parser, which Kubernetes uses, disagrees with RE2's: ``\\C`` (any byte) is RE2's
    alone, and Go reads ``(?<=``/``(?<!`` as a named capture gone wrong."""
    if re2_message is None:
        i = 0
        while i < len(pattern) - 1:
            if pattern.startswith("\\Q", i):
                end = pattern.find("\\E", i + 2)
                if end < 0:
                    break
                i = end + 2
            elif pattern[i] == "\\":
                if pattern[i + 1] == "C":
                    return "error parsing regexp: invalid escape sequence: `\\C`"
                i += 2
            else:
                i += 1
        return None
    code, _, arg = re2_message.partition(": ")
    if code == "invalid perl operator" and arg[:4] in ("(?<=", "(?<!") and arg in pattern:
        rest = pattern[pattern.index(arg) :]
        end = rest.find(">")
        return f"error parsing regexp: invalid named capture: `{rest if end < 0 else rest[: end + 1]}`"
    return None


@functools.lru_cache(maxsize=256)
def compile_regexp(pattern: str) -> Any:
    """The pattern compiled by RE2 (UTF-8, leftmost-first like Go); raises RegexpError."""
    try:
        compiled = re2.compile(pattern.encode("utf-8", "surrogatepass"), _re2_options())
    except re2.error as e:
        detail = e.args[0] if e.args else str(e)
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        message = str(detail)
        raise RegexpError(_go_only_errors(pattern, message) or regexp_error(message, pattern)) from None
    if "\\C" in pattern:
        go_error = _go_only_errors(pattern, None)
        if go_error is not None:
            raise RegexpError(go_error)
    return compiled


def _regex(pattern: str) -> Any:
    try:
        return compile_regexp(pattern)
    except RegexpError as e:
        raise ValueError(f"Illegal regex: {e}") from None


def _utf8_width(lead: int) -> int:
    if lead < 0xC0:
        return 1
    if lead < 0xE0:
        return 2
    if lead < 0xF0:
        return 3
    return 4


def _find_all(regexp: Any, text: bytes, n: int) -> list[str]:
    """Go's Regexp.FindAllString: successive non-overlapping matches, an empty match right after
    the previous match ignored, at most ``n`` of them (all when ``n`` < 0)."""
    found: list[str] = []
    end = len(text)
    pos, prev_end = 0, -1
    while pos <= end and (n < 0 or len(found) < n):
        m = regexp.search(text, pos)
        if m is None:
            break
        start, stop = m.span()
        accept = True
        if stop == pos:  # an empty match
            if start == prev_end:
                accept = False
            pos += _utf8_width(text[pos]) if pos < end else 1
        else:
            pos = stop
        prev_end = stop
        if accept:
            found.append(text[start:stop].decode("utf-8", "surrogatepass"))
    return found


def _fn_find(s: str, pattern: str) -> str:
    m = _regex(pattern).search(s.encode("utf-8", "surrogatepass"))
    return m.group().decode("utf-8", "surrogatepass") if m else ""


def _fn_find_all(s: str, pattern: str, n: int = -1) -> list[str]:
    regexp = _regex(pattern)
    if n == 0:
        return []
    return _find_all(regexp, s.encode("utf-8", "surrogatepass"), n)


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
_INVALID_REGEX = "invalid regular expression: "


def _compile_message(error: Exception) -> str:
    text = _STATUS_SUFFIX.sub("", _STATUS_PREFIX.sub("", str(error).strip()))
    return "compilation failed: " + text


def _runtime_message(raw: str) -> str:
    text = _STATUS_PREFIX.sub("", raw.strip())
    if text.startswith(_INVALID_REGEX):
        # matches() with a pattern computed at run time: Kubernetes (cel-go) says Go's words.
        return regexp_error(_STATUS_SUFFIX.sub("", text[len(_INVALID_REGEX) :]), "")
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
    """A compiled selector; use ``compile_selector`` to get one (it is cached).

    ``max_cost`` is Kubernetes' estimate of its worst-case cost (``cel_cost``). A selector over
    ``COST_LIMIT`` is not evaluated: each device gets the error the scheduler's cost limit gives.
    """

    __slots__ = ("_program", "expression", "max_cost")

    def __init__(self, expression: str, program: _cel.Expression, max_cost: int = 0) -> None:
        self.expression = expression
        self._program = program
        self.max_cost = max_cost

    def __repr__(self) -> str:
        return f"CompiledSelector({self.expression!r})"

    @property
    def within_cost_limit(self) -> bool:
        return self.max_cost <= COST_LIMIT

    def require_within_cost_limit(self) -> None:
        """What the API server says of a new selector over the cost limit: raises SelectorCostError."""
        if not self.within_cost_limit:
            raise SelectorCostError(
                f"too complex, exceeds cost limit: the estimated cost {self.max_cost} exceeds Kubernetes' "
                f"CEL cost limit of {COST_LIMIT}, so the API server would reject it"
            )

    def matches(self, device: Device) -> bool:
        """Whether the device is selected; raises SelectorEvaluationError on a CEL runtime error."""
        prepared = device._cel_input()
        if prepared.error is not None:
            raise SelectorEvaluationError(prepared.error)
        if self.max_cost > COST_LIMIT:
            # The scheduler stops an evaluation at the limit; this one could get there, and the
            # C++ runtime cannot count, so it is not started (cel_cost: how that can differ).
            raise SelectorEvaluationError(
                f"operation cancelled: actual cost limit exceeded (Kubernetes' CEL cost limit is {COST_LIMIT}; "
                f"this selector's estimated cost is {self.max_cost})"
            )
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
        budget = _BUDGET.get()
        try:
            if budget is None:
                result = self._program.eval(data=data)
            else:
                started = budget.begin()
                try:
                    result = self._program.eval(data=data)
                finally:
                    budget.end(started)
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
    """Compile a DRA selector expression; raises SelectorCompileError.

    A selector over Kubernetes' cost limit compiles (a stored one is evaluated as the scheduler
    does: it fails on every device); ``require_within_cost_limit`` says what the API server says
    of a new one.
    """
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
    ast = parse_checked(checked.serialize())
    _check_regex_literals(expression, ast)
    try:
        program = _runtime_env().compile(expression, disable_check=True)
    except RuntimeError as e:
        raise SelectorCompileError(_compile_message(e)) from None
    return CompiledSelector(expression, program, estimate_cost(ast).max)


_MATCHES = frozenset({"matches", "matches_string"})
_FINDS = frozenset({"string_find_string", "string_find_all_string", "string_find_all_string_int"})


def _check_regex_literals(expression: str, ast: Checked) -> None:
    """Literal patterns that are no RE2 (Go regexp), reported where Kubernetes reports them: for
    matches() cel-go's regex literal validator (a compile error at the pattern), for find() and
    findAll() their program-creation optimisation."""
    for node in ast.expr.walk():
        if node.kind != "call":
            continue
        overloads = set(ast.overloads.get(node.id, ()))
        if overloads & _MATCHES:
            pattern = node.args[0] if node.target is not None else (node.args[1] if len(node.args) > 1 else None)
        elif overloads & _FINDS and node.target is not None and node.args:
            pattern = node.args[0]
        else:
            continue
        if pattern is None or pattern.kind != "literal" or pattern.literal != "string":
            continue
        try:
            compile_regexp(pattern.value)
        except RegexpError as e:
            if overloads & _MATCHES:
                line, column = ast.location(pattern)
                source = expression.split("\n")[line - 1] if expression else ""
                raise SelectorCompileError(
                    f"compilation failed: ERROR: <input>:{line}:{column}: invalid matches argument\n"
                    f" | {source}\n | {'.' * (column - 1)}^"
                ) from None
            raise SelectorCompileError(f"program instantiation failed: {e}") from None


def _checked_type_name(t: _cel.Type) -> str:
    name = str(t.name())
    return name if "." in name else name.lower()

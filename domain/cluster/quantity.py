"""Kubernetes ``resource.Quantity`` parsing, arithmetic and formatting.

Mirrors k8s.io/apimachinery/pkg/api/resource: the same grammar (including its
quirks, e.g. ``"."`` and ``"Mi"`` parse as zero), the same rounding (values are
rounded away from zero to a multiple of 1n) and the same cap for binary-suffixed
values (2^63-1). Values are kept exactly as an integer number of nano units.
"""

from __future__ import annotations

import functools
from fractions import Fraction

__all__ = [
    "BINARY_SI",
    "DECIMAL_EXPONENT",
    "DECIMAL_SI",
    "Quantity",
    "QuantityError",
]

DECIMAL_EXPONENT = "DecimalExponent"  # 12e6
BINARY_SI = "BinarySI"  # 12Mi
DECIMAL_SI = "DecimalSI"  # 12M

_NANO = 10**9
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
# Parsed binary-suffixed values are capped at this magnitude, as in Kubernetes.
_MAX_BINARY_NANOS = _INT64_MAX * _NANO
# Kubernetes accepts any int32 exponent and any number of digits; exact Python
# integers of that size are not practical, so absurd quantities are rejected.
MAX_DECIMAL_EXPONENT = 1000
MAX_DIGITS = 1000

_SPLIT_RE_STRING = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_ERR_FORMAT = "quantities must match the regular expression '" + _SPLIT_RE_STRING + "'"
_ERR_NUMERIC = "unable to parse numeric part of quantity"
_ERR_SUFFIX = "unable to parse quantity's suffix"

_DIGITS = frozenset("0123456789")
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")

_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_BY_EXPONENT = {exp: suffix for suffix, exp in _DECIMAL_SUFFIXES.items()}
_BINARY_BY_POWER = {exp // 10: suffix for suffix, exp in _BINARY_SUFFIXES.items()}


class QuantityError(ValueError):
    """A string is not a valid quantity, or a conversion is not possible."""


def _scan(s: str) -> tuple[bool, str, str, str, str]:
    """Split like Go's parseQuantityString: (positive, value, num, denom, suffix)."""
    positive = True
    pos = 0
    end = len(s)
    if end and s[0] in "+-":
        positive = s[0] == "+"
        pos = 1

    while True:  # leading zeros
        if pos >= end:
            return positive, "0", "0", "", ""
        if s[pos] != "0":
            break
        pos += 1

    i = pos
    while i < end and s[i] in _DIGITS:
        i += 1
    if i >= end:
        return positive, s, s[pos:], "", ""
    num = s[pos:i] or "0"
    pos = i

    denom = ""
    if s[pos] == ".":
        pos += 1
        i = pos
        while i < end and s[i] in _DIGITS:
            i += 1
        if i >= end:
            return positive, s, num, s[pos:], ""
        denom = s[pos:i]
        pos = i
    value = s[:pos]

    suffix_start = pos
    while pos < end and s[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos >= end:
        return positive, value, num, denom, s[suffix_start:]
    if s[pos] in "+-":
        pos += 1
    while pos < end and s[pos] in _DIGITS:
        pos += 1
    if pos >= end:
        return positive, value, num, denom, s[suffix_start:]
    raise QuantityError(_ERR_FORMAT)


def _interpret(suffix: str) -> tuple[int, int, str]:
    """(base, exponent, format) for a suffix, like Go's quantitySuffixer.interpret."""
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix], DECIMAL_SI
    if suffix in _BINARY_SUFFIXES:
        return 2, _BINARY_SUFFIXES[suffix], BINARY_SI
    if len(suffix) > 1 and suffix[0] in "eE":
        digits = suffix[1:]
        body = digits[1:] if digits[0] in "+-" else digits
        if not body or any(c not in _DIGITS for c in body):
            raise QuantityError(_ERR_SUFFIX)
        parsed = int(digits)
        if not _INT64_MIN <= parsed <= _INT64_MAX:
            raise QuantityError(_ERR_SUFFIX)
        # Go stores the exponent as int32 and silently wraps.
        return 10, (parsed + 2**31) % 2**32 - 2**31, DECIMAL_EXPONENT
    raise QuantityError(_ERR_SUFFIX)


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


@functools.lru_cache(maxsize=4096)
def _parse(s: str) -> tuple[int, str]:
    if not s:
        raise QuantityError(_ERR_FORMAT)
    if s == "0":
        return 0, DECIMAL_SI
    positive, value, num, denom, suffix = _scan(s)
    base, exponent, fmt = _interpret(suffix)
    if len(num) + len(denom) > MAX_DIGITS:
        raise QuantityError(f"quantity has too many digits (more than {MAX_DIGITS})")

    # Replicate which of Go's two code paths runs: only the slow (inf.Dec) path
    # rejects a digit-less number and caps binary values.
    if base == 10:
        fast = 18 - (len(num) + len(denom)) >= 0 and exponent - len(denom) >= -9
    else:
        precision = 15 - len(num) - int(exponent * 3 / 10) - 1 if not denom else -1
        fast = precision >= 0 and int(num + denom) << exponent <= _INT64_MAX
    if not fast and not any(c in _DIGITS for c in value):
        raise QuantityError(_ERR_NUMERIC)

    digits = int(num + denom)
    if base == 2:
        nanos = _ceil_div(digits * (1 << exponent) * _NANO, 10 ** len(denom))
    else:
        power = exponent - len(denom) + 9
        if power > MAX_DECIMAL_EXPONENT:
            raise QuantityError(f"quantity exponent is too large (above 1e{MAX_DECIMAL_EXPONENT})")
        if power >= 0:
            nanos = digits * 10**power
        elif digits == 0:
            nanos = 0
        elif -power > len(str(digits)):
            nanos = 1  # below 1n: Kubernetes rounds up to the smallest unit
        else:
            nanos = _ceil_div(digits, 10**-power)

    if fmt == BINARY_SI:
        nanos = min(nanos, _MAX_BINARY_NANOS)
        if 0 < nanos < _NANO:
            fmt = DECIMAL_SI
    return (nanos if positive else -nanos), fmt


def _strip_factors(value: int, base: int) -> tuple[int, int]:
    times = 0
    while value and value % base == 0:
        value //= base
        times += 1
    return value, times


class Quantity:
    """An exact, immutable Kubernetes quantity.

    Equality, hashing and ordering are by numeric value, so ``40960Mi == 40Gi``.
    The format (decimal SI, binary SI or exponent) only affects ``str()``.
    """

    __slots__ = ("_format", "_nanos")

    _nanos: int
    _format: str

    def __init__(self, nanos: int = 0, fmt: str = DECIMAL_SI) -> None:
        if fmt not in (DECIMAL_SI, BINARY_SI, DECIMAL_EXPONENT):
            raise ValueError(f"unknown quantity format {fmt!r}")
        object.__setattr__(self, "_nanos", int(nanos))
        object.__setattr__(self, "_format", fmt)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Quantity is immutable")

    @classmethod
    def parse(cls, s: str) -> Quantity:
        """Parse like ``resource.ParseQuantity``; raises QuantityError."""
        if not isinstance(s, str):
            raise QuantityError(f"quantity must be a string, not {type(s).__name__}")
        nanos, fmt = _parse(s)
        return cls(nanos, fmt)

    @classmethod
    def is_valid(cls, s: str) -> bool:
        try:
            cls.parse(s)
        except QuantityError:
            return False
        return True

    @classmethod
    def from_int(cls, value: int, fmt: str = DECIMAL_SI) -> Quantity:
        return cls(int(value) * _NANO, fmt)

    @property
    def nanos(self) -> int:
        """The value in units of 1e-9 (always exact)."""
        return self._nanos

    @property
    def format(self) -> str:
        return self._format

    def as_fraction(self) -> Fraction:
        return Fraction(self._nanos, _NANO)

    def sign(self) -> int:
        return (self._nanos > 0) - (self._nanos < 0)

    def is_integer(self) -> bool:
        """True if the value is whole and fits in an int64 (asInteger would succeed)."""
        whole, rest = divmod(self._nanos, _NANO)
        return rest == 0 and _INT64_MIN <= whole <= _INT64_MAX

    def as_integer(self) -> int:
        if not self.is_integer():
            raise QuantityError("cannot convert value to integer")
        return self._nanos // _NANO

    def as_approximate_float(self) -> float:
        try:
            return float(self.as_fraction())
        except OverflowError:
            return float("inf") if self._nanos > 0 else float("-inf")

    def compare(self, other: Quantity) -> int:
        return (self._nanos > other._nanos) - (self._nanos < other._nanos)

    def add(self, other: Quantity | int) -> Quantity:
        return self._combine(other, 1)

    def sub(self, other: Quantity | int) -> Quantity:
        return self._combine(other, -1)

    def _combine(self, other: Quantity | int, sign: int) -> Quantity:
        if isinstance(other, bool):
            raise TypeError("cannot add a bool to a quantity")
        if isinstance(other, int):
            other = Quantity.from_int(other, DECIMAL_EXPONENT)
        if not isinstance(other, Quantity):
            raise TypeError(f"cannot combine a quantity with {type(other).__name__}")
        # Like Go, the receiver keeps its format unless it is zero.
        fmt = other._format if self._nanos == 0 else self._format
        return Quantity(self._nanos + sign * other._nanos, fmt)

    def __add__(self, other: Quantity | int) -> Quantity:
        if not isinstance(other, Quantity | int):
            return NotImplemented
        return self.add(other)

    def __sub__(self, other: Quantity | int) -> Quantity:
        if not isinstance(other, Quantity | int):
            return NotImplemented
        return self.sub(other)

    def __neg__(self) -> Quantity:
        return Quantity(-self._nanos, self._format)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Quantity):
            return self._nanos == other._nanos
        return NotImplemented

    def __hash__(self) -> int:
        return hash(("Quantity", self._nanos))

    def __lt__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._nanos < other._nanos

    def __le__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._nanos <= other._nanos

    def __gt__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._nanos > other._nanos

    def __ge__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._nanos >= other._nanos

    def __bool__(self) -> bool:
        return self._nanos != 0

    def __str__(self) -> str:
        """Canonical form, as ``Quantity.String()`` prints it (1.5 -> 1500m, 1.5Gi -> 1536Mi)."""
        nanos = self._nanos
        if nanos == 0:
            return "0"
        sign = "-" if nanos < 0 else ""
        magnitude = abs(nanos)
        fmt = self._format
        if fmt == BINARY_SI and (magnitude < 1024 * _NANO or magnitude % _NANO):
            fmt = DECIMAL_SI  # small or fractional binary values are shown in decimal
        if fmt == BINARY_SI:
            amount, power = _strip_factors(magnitude // _NANO, 1024)
            if power > 6:
                amount *= 1024 ** (power - 6)
                power = 6
            return f"{sign}{amount}{_BINARY_BY_POWER.get(power, '')}"
        amount, times = _strip_factors(magnitude, 10)
        exponent = times - 9
        while exponent % 3:
            amount *= 10
            exponent -= 1
        if fmt == DECIMAL_EXPONENT:
            return f"{sign}{amount}" + (f"e{exponent}" if exponent else "")
        if exponent > 18:
            amount *= 10 ** (exponent - 18)
            exponent = 18
        return f"{sign}{amount}{_DECIMAL_BY_EXPONENT[exponent]}"

    def __repr__(self) -> str:
        return f"Quantity({str(self)!r})"

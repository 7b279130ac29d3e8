"""Quantity parsing and arithmetic, checked against facts from Kubernetes'
k8s.io/apimachinery/pkg/api/resource tests (values, canonical forms, rounding)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from domain.cluster.quantity import (
    BINARY_SI,
    DECIMAL_EXPONENT,
    DECIMAL_SI,
    MAX_DECIMAL_EXPONENT,
    Quantity,
    QuantityError,
)

KI = 1024
MI = KI * KI
GI = MI * KI
TI = GI * KI
PI = TI * KI
EI = PI * KI
INT64_MAX = 2**63 - 1


def F(text: str) -> Fraction:  # noqa: N802 - reads like a literal
    return Fraction(text)


# (input, exact value, format remembered for printing)
PARSED = [
    ("0", 0, DECIMAL_SI),
    ("0n", 0, DECIMAL_SI),
    ("0Ki", 0, BINARY_SI),
    ("0Ti", 0, BINARY_SI),
    ("1", 1, DECIMAL_SI),
    ("1Ki", KI, BINARY_SI),
    ("8Ki", 8 * KI, BINARY_SI),
    ("7Mi", 7 * MI, BINARY_SI),
    ("6Gi", 6 * GI, BINARY_SI),
    ("5Ti", 5 * TI, BINARY_SI),
    ("4Pi", 4 * PI, BINARY_SI),
    ("3Ei", 3 * EI, BINARY_SI),
    ("100Ti", 100 * TI, BINARY_SI),
    ("5n", F("5e-9"), DECIMAL_SI),
    ("4u", F("4e-6"), DECIMAL_SI),
    ("3m", F("3e-3"), DECIMAL_SI),
    ("8k", 8000, DECIMAL_SI),
    ("50k", 50000, DECIMAL_SI),
    ("7M", 7 * 10**6, DECIMAL_SI),
    ("6G", 6 * 10**9, DECIMAL_SI),
    ("300T", 300 * 10**12, DECIMAL_SI),
    ("2P", 2 * 10**15, DECIMAL_SI),
    ("1E", 10**18, DECIMAL_SI),
    ("12E", 12 * 10**18, DECIMAL_SI),
    ("1E-3", F("1e-3"), DECIMAL_EXPONENT),
    ("1e3", 1000, DECIMAL_EXPONENT),
    ("1E6", 10**6, DECIMAL_EXPONENT),
    ("1e14", 10**14, DECIMAL_EXPONENT),
    ("1.3E+6", 1_300_000, DECIMAL_EXPONENT),
    ("1.53E12", 153 * 10**10, DECIMAL_EXPONENT),
    ("0.5e-2", F("0.005"), DECIMAL_EXPONENT),
    ("100.035k", 100035, DECIMAL_SI),
    ("0.0005k", F("0.5"), DECIMAL_SI),
    ("0.00500", F("0.005"), DECIMAL_SI),
    ("10.035M", 10035000, DECIMAL_SI),
    ("6.987654321G", 6987654321, DECIMAL_SI),
    ("1.01E", 101 * 10**16, DECIMAL_SI),
    # rounded up (away from zero) to the nano grid
    ("3.001n", F("4e-9"), DECIMAL_SI),
    ("1.1E-9", F("2e-9"), DECIMAL_EXPONENT),
    ("0.0000000001", F("1e-9"), DECIMAL_SI),
    ("0.5e-9", F("1e-9"), DECIMAL_EXPONENT),
    ("0.00000012345", F("124e-9"), DECIMAL_SI),
    ("-1.5n", F("-2e-9"), DECIMAL_SI),
    # binary values are capped at 2^63-1
    ("9Ei", INT64_MAX, BINARY_SI),
    ("9223372036854775807Ki", INT64_MAX, BINARY_SI),
    ("-9Ei", -INT64_MAX, BINARY_SI),
    # fractional binary values
    ("100.035Ki", F("102435.84"), BINARY_SI),
    ("0.5Mi", MI // 2, BINARY_SI),
    ("0.05Gi", F("53687091.2"), BINARY_SI),
    ("0.000000000001Ki", F("2e-9"), DECIMAL_SI),  # below 1: rounds up and turns decimal
    (".001", F("0.001"), DECIMAL_SI),
    ("1.", 1, DECIMAL_SI),
    ("1.G", 10**9, DECIMAL_SI),
    # large decimals are exact, not capped
    ("9999999999999999999999999999999999999G", 9999999999999999999999999999999999999 * 10**9, DECIMAL_SI),
    ("-9223372036854775809", -(2**63) - 1, DECIMAL_SI),
    # Go's scanner accepts these as zero
    (".", 0, DECIMAL_SI),
    ("-", 0, DECIMAL_SI),
    ("Mi", 0, BINARY_SI),
]


@pytest.mark.parametrize(("text", "value", "fmt"), PARSED)
def test_parse_value_and_format(text: str, value: int | Fraction, fmt: str) -> None:
    q = Quantity.parse(text)
    assert q.as_fraction() == value
    assert q.format == fmt


INVALID = [
    ("", "quantities must match the regular expression"),
    ("1.1.M", "quantities must match the regular expression"),
    ("1+1.0M", "quantities must match the regular expression"),
    ("0.1mi", "unable to parse quantity's suffix"),
    ("0.1am", "quantities must match the regular expression"),
    ("aoeu", "quantities must match the regular expression"),
    (".5i", "unable to parse quantity's suffix"),
    ("1i", "unable to parse quantity's suffix"),
    ("-3.01e-", "unable to parse quantity's suffix"),
    (" 1", "quantities must match the regular expression"),
    ("1 ", "quantities must match the regular expression"),
    ("200K", "unable to parse quantity's suffix"),
    ("10Mo", "quantities must match the regular expression"),
    ("10Mm", "unable to parse quantity's suffix"),
    ("Three", "quantities must match the regular expression"),
    ("1e", "unable to parse quantity's suffix"),
    # Go's slow path needs a digit: a digit-less number fails there
    ("Pi", "unable to parse numeric part of quantity"),
    ("e-10", "unable to parse numeric part of quantity"),
]


@pytest.mark.parametrize(("text", "message"), INVALID)
def test_parse_rejects(text: str, message: str) -> None:
    with pytest.raises(QuantityError, match=message.replace("'", ".")):
        Quantity.parse(text)
    assert not Quantity.is_valid(text)


def test_quantity_error_is_value_error() -> None:
    assert issubclass(QuantityError, ValueError)


def test_absurd_exponents() -> None:
    with pytest.raises(QuantityError, match="too large"):
        Quantity.parse(f"1e{MAX_DECIMAL_EXPONENT + 1}")
    assert Quantity.parse(f"1e{MAX_DECIMAL_EXPONENT - 9}").as_fraction() == 10 ** (MAX_DECIMAL_EXPONENT - 9)
    # tiny values do not need big numbers: they round up to 1n
    assert Quantity.parse("5e-999999").nanos == 1
    assert Quantity.parse("-5e-999999").nanos == -1
    assert Quantity.parse("0e-999999").nanos == 0
    with pytest.raises(QuantityError, match="too many digits"):
        Quantity.parse("1" * 1001)


CANONICAL = [
    ("1Gi", "1Gi"),
    ("1024Mi", "1Gi"),
    ("300Mi", "300Mi"),
    ("307200Ki", "300Mi"),
    ("1001Gi", "1001Gi"),
    ("1024Gi", "1Ti"),
    ("5", "5"),
    ("5000m", "5"),
    ("1000M", "1G"),
    ("0.001T", "1G"),
    ("1000u", "1m"),
    ("1.08", "1080m"),
    ("1080000000n", "1080m"),
    ("1.5", "1500m"),
    ("1.5Gi", "1536Mi"),
    ("0.5Ki", "512"),
    ("1025Ki", "1025Ki"),
    ("1.1Ki", "1126400m"),  # not a whole number: printed as decimal
    (".001Ki", "1024m"),
    (".000001Ki", "1024u"),
    (".000000001Ki", "1024n"),
    (".000000000001Ki", "2n"),
    ("1e9", "1e9"),
    (".001e12", "1e9"),
    ("0.001e0", "1e-3"),
    ("1000e-12", "1e-9"),
    ("80e-3", "80e-3"),
    ("1e100", "10e99"),
    ("00", "0"),
    ("1000000000000000000", "1E"),
    ("10000000000000000000", "10E"),
    ("1000E", "1000E"),
    ("999999999999999999.1", "999999999999999999100m"),
    ("9223372036854775807.0", "9223372036854775807"),
    ("8Ei", "9223372036854775807"),
]


@pytest.mark.parametrize(("text", "canonical"), CANONICAL)
def test_canonical_string(text: str, canonical: str) -> None:
    q = Quantity.parse(text)
    assert str(q) == canonical
    assert Quantity.parse(canonical) == q
    if q.sign():
        assert str(-q) == "-" + canonical
    assert repr(q) == f"Quantity({canonical!r})"


def test_equality_is_numeric_across_units() -> None:
    assert Quantity.parse("40960Mi") == Quantity.parse("40Gi")
    assert Quantity.parse("200M") == Quantity.parse("0.2G")
    assert Quantity.parse("2000k") == Quantity.parse("0.002G")
    assert Quantity.parse("1") == Quantity.parse("1000m")
    assert hash(Quantity.parse("40960Mi")) == hash(Quantity.parse("40Gi"))
    assert Quantity.parse("200M") != Quantity.parse("0.3G")
    assert len({Quantity.parse("1Ki"), Quantity.parse("1024"), Quantity.parse("1.024k")}) == 1


def test_ordering() -> None:
    assert Quantity.parse("50M") < Quantity.parse("50Mi")
    assert Quantity.parse("50Mi").compare(Quantity.parse("50M")) == 1
    assert Quantity.parse("50M").compare(Quantity.parse("50Mi")) == -1
    assert Quantity.parse("200M").compare(Quantity.parse("0.2G")) == 0
    assert Quantity.parse("40Gi").compare(Quantity.parse("40Gi")) == 0
    assert sorted(Quantity.parse(s) for s in ["1Gi", "1G", "1", "-1", "1m"]) == [
        Quantity.parse(s) for s in ["-1", "1m", "1", "1G", "1Gi"]
    ]
    assert Quantity.parse("1Ki") >= Quantity.parse("1024")
    assert Quantity.parse("1Ki") <= Quantity.parse("1024")
    assert Quantity.parse("1Ki") > Quantity.parse("1023")


def test_sign() -> None:
    assert Quantity.parse("-1m").sign() == -1
    assert Quantity.parse("0Gi").sign() == 0
    assert Quantity.parse("3n").sign() == 1
    assert not Quantity.parse("0")
    assert Quantity.parse("1n")


def test_integers() -> None:
    assert Quantity.parse("50k").as_integer() == 50000
    assert Quantity.parse("40Gi").as_integer() == 40 * GI
    assert Quantity.parse("50000000G").is_integer()
    assert Quantity.parse("-9223372036854775808").as_integer() == -(2**63)
    assert Quantity.parse("9223372036854775807").as_integer() == INT64_MAX
    # Kubernetes' own tests note that these "should be" int64-convertible; they are here.
    assert Quantity.parse("1000000000000000000").as_integer() == 10**18
    assert Quantity.parse("1000m").as_integer() == 1
    for text in ["9223372036854775808", "-9223372036854775809", "1.5", "1m", "9999999999999999999999999999999999999G"]:
        q = Quantity.parse(text)
        assert not q.is_integer(), text
        with pytest.raises(QuantityError, match="cannot convert value to integer"):
            q.as_integer()


def test_approximate_float() -> None:
    assert Quantity.parse("50.703k").as_approximate_float() == 50703.0
    assert Quantity.parse("1.5").as_approximate_float() == 1.5
    assert Quantity.parse("-1Ki").as_approximate_float() == -1024.0
    assert Quantity.parse("12345678n").as_approximate_float() == pytest.approx(0.012345678)
    assert Quantity.parse("1e400").as_approximate_float() == float("inf")
    assert Quantity.parse("-1e400").as_approximate_float() == float("-inf")


def test_arithmetic() -> None:
    q = Quantity.parse
    assert q("50k").add(q("20")) == q("50.02k")
    assert q("50k").add(20) == q("50020")
    assert q("50k").sub(q("20")) == q("49.98k")
    assert q("50k").sub(20) == q("49980")
    assert q("50k").add(20).sub(q("100k")).as_integer() == -49980
    assert q("50k").add(20).sub(q("100k")).sub(-50000).as_integer() == 20
    assert q("1Gi") + q("1Gi") == q("2Gi")
    assert q("1Gi") - 1 == q("1073741823")
    big = q("9999999999999999999999999999999999999")
    assert big.add(q("1")).compare(big.add(q("2"))) == -1
    assert big == q("9999999999999999999999999999999999999")  # operands are not mutated
    with pytest.raises(TypeError):
        q("1").add(True)


def test_arithmetic_keeps_receiver_format_unless_zero() -> None:
    q = Quantity.parse
    assert str(q("1Gi").add(q("1M"))) == "1074741824"  # binary but not a multiple of 1Ki
    assert q("1Gi").add(q("1Gi")).format == BINARY_SI
    assert str(q("1Gi").add(q("1Gi"))) == "2Gi"
    assert q("0").add(q("1Ki")).format == BINARY_SI
    assert q("0Ki").add(q("1k")).format == DECIMAL_SI
    assert q("0").sub(q("1Ki")).format == BINARY_SI
    assert q("1k").add(1).format == DECIMAL_SI
    assert q("0").add(1).format == DECIMAL_EXPONENT


def test_constructors() -> None:
    assert Quantity.from_int(5) == Quantity.parse("5")
    assert str(Quantity.from_int(2048, BINARY_SI)) == "2Ki"
    assert Quantity(1_500_000_000).as_fraction() == F("1.5")
    with pytest.raises(ValueError, match="unknown quantity format"):
        Quantity(1, "Binary")
    with pytest.raises(QuantityError):
        Quantity.parse(5)  # type: ignore[arg-type]


def test_immutable() -> None:
    q = Quantity.parse("1")
    with pytest.raises(AttributeError):
        q._nanos = 5  # type: ignore[misc]

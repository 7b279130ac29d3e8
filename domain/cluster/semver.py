"""Semantic versions (semver.org 2.0.0), as DRA ``version`` attributes hold them.

Parsing follows github.com/blang/semver/v4 ``Parse``, which Kubernetes' CEL
``semver()`` uses; ``normalize=True`` follows Kubernetes' ``normalizeAndParse``
(``semver(s, true)``). Build metadata is kept but ignored when comparing.
"""

from __future__ import annotations

import functools

__all__ = ["Semver", "SemverError"]

_NUMBERS = frozenset("0123456789")
_ALPHANUM = frozenset("-ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_UINT64_MAX = 2**64 - 1

PrereleaseIdentifier = int | str


class SemverError(ValueError):
    """A string is not a valid semantic version."""


def _number(part: str, what: str) -> int:
    if any(c not in _NUMBERS for c in part):
        raise SemverError(f"Invalid character(s) found in {what} number {part!r}")
    if len(part) > 1 and part[0] == "0":
        raise SemverError(f"{what.capitalize()} number must not contain leading zeroes {part!r}")
    if not part:
        raise SemverError(f"{what.capitalize()} number is empty")
    value = int(part)
    if value > _UINT64_MAX:
        raise SemverError(f"{what.capitalize()} number {part!r} is out of range")
    return value


def _prerelease(part: str) -> PrereleaseIdentifier:
    if not part:
        raise SemverError("Prerelease is empty")
    if all(c in _NUMBERS for c in part):
        if len(part) > 1 and part[0] == "0":
            raise SemverError(f"Numeric PreRelease version must not contain leading zeroes {part!r}")
        value = int(part)
        if value > _UINT64_MAX:
            raise SemverError(f"Numeric PreRelease version {part!r} is out of range")
        return value
    if all(c in _ALPHANUM for c in part):
        return part
    raise SemverError(f"Invalid character(s) found in prerelease {part!r}")


def _normalize(s: str) -> str:
    s = s.removeprefix("v")
    parts = s.split(".", 2)
    for i, part in enumerate(parts):
        if len(part) > 1:
            part = part.lstrip("0")
            if not part or part[0] not in _NUMBERS:
                part = "0" + part
            parts[i] = part
    if len(parts) < 3:
        if any(c in "+-" for c in parts[-1]):
            raise SemverError("short version cannot contain PreRelease/Build meta data")
        parts.extend("0" * (3 - len(parts)))
    return ".".join(parts)


@functools.lru_cache(maxsize=4096)
def _parse(s: str, normalize: bool) -> Semver:
    if normalize:
        s = _normalize(s)
    if not s:
        raise SemverError("Version string empty")
    parts = s.split(".", 2)
    if len(parts) != 3:
        raise SemverError("No Major.Minor.Patch elements found")
    major = _number(parts[0], "major")
    minor = _number(parts[1], "minor")
    rest = parts[2]
    build: list[str] = []
    if "+" in rest:
        rest, _, build_str = rest.partition("+")
        build = build_str.split(".")
    prerelease: list[str] = []
    if "-" in rest:
        rest, _, pre_str = rest.partition("-")
        prerelease = pre_str.split(".")
    patch = _number(rest, "patch")
    pre = tuple(_prerelease(p) for p in prerelease)
    for b in build:
        if not b:
            raise SemverError("Build meta data is empty")
        if any(c not in _ALPHANUM for c in b):
            raise SemverError(f"Invalid character(s) found in build meta data {b!r}")
    return Semver(major, minor, patch, pre, tuple(build))


def _compare_identifiers(a: PrereleaseIdentifier, b: PrereleaseIdentifier) -> int:
    a_num = isinstance(a, int)
    b_num = isinstance(b, int)
    if a_num != b_num:
        return -1 if a_num else 1  # numeric identifiers sort before alphanumeric ones
    return (a > b) - (a < b)  # type: ignore[operator]


class Semver:
    """An immutable semantic version."""

    __slots__ = ("build", "major", "minor", "patch", "prerelease")

    major: int
    minor: int
    patch: int
    prerelease: tuple[PrereleaseIdentifier, ...]
    build: tuple[str, ...]

    def __init__(
        self,
        major: int,
        minor: int = 0,
        patch: int = 0,
        prerelease: tuple[PrereleaseIdentifier, ...] = (),
        build: tuple[str, ...] = (),
    ) -> None:
        object.__setattr__(self, "major", major)
        object.__setattr__(self, "minor", minor)
        object.__setattr__(self, "patch", patch)
        object.__setattr__(self, "prerelease", tuple(prerelease))
        object.__setattr__(self, "build", tuple(build))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Semver is immutable")

    @classmethod
    def parse(cls, s: str, *, normalize: bool = False) -> Semver:
        """Parse strictly, or like ``semver(s, true)`` when normalize is set."""
        if not isinstance(s, str):
            raise SemverError(f"version must be a string, not {type(s).__name__}")
        return _parse(s, normalize)

    @classmethod
    def is_valid(cls, s: str, *, normalize: bool = False) -> bool:
        try:
            cls.parse(s, normalize=normalize)
        except SemverError:
            return False
        return True

    def compare(self, other: Semver) -> int:
        for a, b in ((self.major, other.major), (self.minor, other.minor), (self.patch, other.patch)):
            if a != b:
                return 1 if a > b else -1
        if not self.prerelease or not other.prerelease:
            # A release sorts after any of its pre-releases.
            return (not self.prerelease) - (not other.prerelease)
        for a_id, b_id in zip(self.prerelease, other.prerelease, strict=False):
            c = _compare_identifiers(a_id, b_id)
            if c:
                return c
        n, m = len(self.prerelease), len(other.prerelease)
        return (n > m) - (n < m)

    def _key(self) -> tuple[int, int, int, tuple[PrereleaseIdentifier, ...]]:
        return self.major, self.minor, self.patch, self.prerelease

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Semver):
            return self._key() == other._key()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(("Semver", self._key()))

    def __lt__(self, other: Semver) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return self.compare(other) < 0

    def __le__(self, other: Semver) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return self.compare(other) <= 0

    def __gt__(self, other: Semver) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return self.compare(other) > 0

    def __ge__(self, other: Semver) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return self.compare(other) >= 0

    def core_string(self) -> str:
        """The version without build metadata: equal versions give equal strings."""
        s = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            s += "-" + ".".join(str(p) for p in self.prerelease)
        return s

    def __str__(self) -> str:
        s = self.core_string()
        if self.build:
            s += "+" + ".".join(self.build)
        return s

    def __repr__(self) -> str:
        return f"Semver({str(self)!r})"

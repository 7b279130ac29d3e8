"""Kubernetes' cost limit for DRA selectors, RE2 regular expressions, and the bounds on evaluating a
typed selector (domain.allocator.cel_cost, cel, limits).

The figures are Kubernetes 1.37's: ``CompileCELExpression`` of k8s.io/dynamic-resource-allocation
v0.37.2 (StoredExpressions, the scheduler's environment) gave each ``MaxCost``, and
``DeviceMatches`` each runtime error; the first group restates compile_test.go's ``expectCost``.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from domain.allocator.cel import (
    COST_LIMIT,
    Device,
    SelectorCompileError,
    SelectorCostError,
    SelectorEvaluationError,
    SelectorTimeLimit,
    compile_selector,
    evaluation_budget,
)
from domain.allocator.limits import Limits, SelectorMemoryLimit, run_bounded

DRA = "dra.example.com"
MAX_UINT64 = 2**64 - 1

COSTS = [
    # k8s.io/dynamic-resource-allocation/cel/compile_test.go
    ('device.driver == "dra.example.com"', 4),
    ('"no-such-domain" in device.attributes', 3),
    ('device.attributes["dra.example.com"].name == "fish"', 5),
    ('cel.bind(dra, device.attributes["dra.example.com"], dra.name)', 15),
    ('device.attributes["dra.example.com"].name.exists(x, x > 0)', 5 + (3 + 3) * 64),
    ('device.attributes["dra.example.com"].name.includes(true)', 4 + 48),
    ('device.attributes["dra.example.com"].name.isGreaterThan(semver("v0.0.1", true)) && isSemver("v1.0.0", true)', 7),
    (
        '!("name" in device.capacity["dra.example.com"]) || '
        'device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))',
        11,
    ),
    ('device.attributes.exists_one(x, x == "dra.example.com")', 164),
    ('device.attributes["dra.example.com"].exists_one(x, x == "services")', 133),
    ('device.attributes["dra.example.com"].services.split("example").size() >= 2', 19),
    ('device.attributes["dra.example.com"].services.matches("[^a]?sym")', 18),
    ("device.allowMultipleAllocations == true", 3),
    # CompileCELExpression of Kubernetes 1.37
    ('has(device.attributes["x"].y)', 3),
    ('device.capacity["dra.example.com"].memory == quantity("1Gi")', 6),
    ('"%s".format([device.driver]) == ""', 13),
    ("[1,2].map(x, x * 2).size() == 2", 51),
    ('{"a": device.driver}["a"] == "x"', 34),
    ('["a","b"].join(",") == "a,b"', 1844674407370955275),  # a literal list's strings have no known size
    ('device.attributes["dra.example.com"]["a"] + device.attributes["dra.example.com"]["b"] == "x"', 22),
    ('device.attributes["dra.example.com"][?"a"].orValue(1) == 1', 6),
    ('device.attributes["dra.example.com"].a.replace("a", "bb") == ""', 17),
    ('device.attributes.all(d, device.attributes[d].all(n, n != ""))', 4355),
    (
        "device.capacity.all(d, device.capacity[d].all(n, "
        'device.capacity[d][n].isGreaterThan(quantity("1"))))',
        11523,
    ),
    ('device.attributes["dra.example.com"].model.findAll("[0-9]+", 2).size() == 1', 20),
    ("cel.bind(x, device.driver, cel.bind(y, x + x, cel.bind(z, y + y, z.contains(x))))", 259),
    ('cel.bind(x, device.attributes["dra.example.com"].names, x.map(v, v + "a").size() > 0)', MAX_UINT64),
    ("device.driver.split('.', 2)[0] == 'dra'", 17),
    ("'aaaaaaaaaaaaaaaaaaaaaaaaaaaaa!'.find('^(a+)+$') == ''", 8),
]

TEN = "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"
# From Kubernetes' validatingadmissionpolicy integration test, as compile_test.go's "expensive".
NESTED = (
    f"{TEN}.all(x, {TEN}.all(y, {TEN}.all(z, {TEN}.all(z2, {TEN}.all(z3, {TEN}.all(z4, "
    f"{TEN}.all(z5, int('1'.find('[0-9]*')) < 100)))))))"
)


def doubling(times: int) -> str:
    return "cel.bind(s, 'a', " + "cel.bind(s, s + s, " * times + "size(s) > 0" + ")" * (times + 1)


@pytest.mark.parametrize(("expression", "cost"), COSTS)
def test_estimates_are_kubernetes(expression: str, cost: int) -> None:
    assert compile_selector(expression).max_cost == cost


@pytest.mark.parametrize(
    ("expression", "cost"),
    [(doubling(5), 82), (doubling(17), 26440), (doubling(22), 839149), (doubling(23), 1678022), (NESTED, 85555551)],
)
def test_estimates_of_dear_selectors_are_kubernetes(expression: str, cost: int) -> None:
    compiled = compile_selector(expression)
    assert compiled.max_cost == cost
    assert compiled.within_cost_limit is (cost <= COST_LIMIT)


@pytest.mark.parametrize("expression", [doubling(23), doubling(26), NESTED])
def test_over_the_limit_the_api_server_refuses_and_the_scheduler_stops(expression: str) -> None:
    compiled = compile_selector(expression)
    with pytest.raises(SelectorCostError, match="too complex, exceeds cost limit"):
        compiled.require_within_cost_limit()
    start = time.perf_counter()
    with pytest.raises(SelectorEvaluationError, match="operation cancelled: actual cost limit exceeded"):
        compiled.matches(Device(driver=DRA))
    assert time.perf_counter() - start < 0.1  # not evaluated: 10^7 iterations, or 64 Mi characters


def test_a_cost_error_is_a_compile_error() -> None:
    assert issubclass(SelectorCostError, SelectorCompileError)


# --- regular expressions: RE2, as Go's regexp ---------------------------------------------------------


@pytest.mark.parametrize(
    "expression",
    [
        # Go's FindAllString: an empty match right after a match is skipped.
        '"123 abc 456".findAll("[0-9]*") == ["123", "", "", "", "", "456"]',
        '"123 abc 456".findAll("[0-9]*", 2) == ["123", ""]',
        '"ééé".findAll("") == ["", "", "", ""]',
        '"héllo wörld".findAll("\\\\w+") == ["h", "llo", "w", "rld"]',
        # $ is the end of the text, not before a final newline.
        '"a\\nb\\n".find("b$") == ""',
        '"(a)".find("\\\\Q(a)\\\\E") == "(a)"',
        '"ab".find("a|ab") == "a"',  # leftmost-first, like Perl and Go
        '"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!".find("^(a+)+$") == ""',
        '"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!".findAll("(a|aa)+$") == []',
        '"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!".matches("^(a+)+$") == false',
    ],
)
def test_find_is_go_regexp(expression: str) -> None:
    start = time.perf_counter()
    assert compile_selector(expression).matches(Device(driver=DRA)) is True
    assert time.perf_counter() - start < 0.5


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        (
            "'aa'.find('(a)\\\\1') == ''",
            "program instantiation failed: error parsing regexp: invalid escape sequence: `\\1`",
        ),
        (
            "'aa'.findAll('a(?=a)').size() == 0",
            "program instantiation failed: error parsing regexp: invalid or unsupported Perl syntax: `(?=`",
        ),
        (
            "'aa'.find('(?<!a)b') == ''",
            "program instantiation failed: error parsing regexp: invalid named capture: `(?<!a)b`",
        ),
        ("'aa'.find('\\\\C') == ''", "program instantiation failed: error parsing regexp: invalid escape sequence: `\\C`"),
        ("'aa'.find('(') == ''", "program instantiation failed: error parsing regexp: missing closing ): `(`"),
        ("'aa'.find('a{1001}') == ''", "program instantiation failed: error parsing regexp: invalid repeat count: `{1001}`"),
        (
            "'aa'.matches('(a)\\\\1')",
            "compilation failed: ERROR: <input>:1:14: invalid matches argument\n | 'aa'.matches('(a)\\\\1')\n | .............^",
        ),
        (
            "true &&\n  matches('aa', 'a(?=a)')",
            "compilation failed: ERROR: <input>:2:17: invalid matches argument\n |   matches('aa', 'a(?=a)')\n"
            " | ................^",
        ),
    ],
)
def test_literal_patterns_that_are_no_re2_do_not_compile(expression: str, message: str) -> None:
    with pytest.raises(SelectorCompileError) as error:
        compile_selector(expression)
    assert str(error.value) == message


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        (
            "'aa'.find(device.driver + '(') == ''",
            "Illegal regex: error parsing regexp: missing closing ): `dra.example.com(`",
        ),
        ("'aa'.matches(device.driver + '(')", "error parsing regexp: missing closing ): `dra.example.com(`"),
        ("'aa'.matches(device.driver + '\\\\1')", "error parsing regexp: invalid escape sequence: `\\1`"),
    ],
)
def test_computed_patterns_that_are_no_re2_fail_on_the_device(expression: str, message: str) -> None:
    with pytest.raises(SelectorEvaluationError) as error:
        compile_selector(expression).matches(Device(driver=DRA))
    assert str(error.value) == message


# --- bounds on evaluation ---------------------------------------------------------------------------


def test_the_budget_stops_evaluations_once_spent() -> None:
    selector = compile_selector("[1, 2, 3].all(x, [1, 2, 3].all(y, x + y > 0))")
    device = Device(driver=DRA)
    with evaluation_budget(0.0) as budget:
        assert selector.matches(device)  # begun in time: it finishes
        assert budget.spent > 0
        with pytest.raises(SelectorTimeLimit, match="took more than 0 s of CPU time"):
            selector.matches(device)
    assert selector.matches(device)  # no budget outside


def test_run_bounded_returns_values_and_raises_exceptions() -> None:
    assert run_bounded(lambda: {"x": [1, 2]}, Limits()) == {"x": [1, 2]}

    def fails() -> Any:
        raise LookupError("DeviceClass nope does not exist")

    with pytest.raises(LookupError, match="nope"):
        run_bounded(fails, Limits())


def test_run_bounded_stops_at_the_memory_limit() -> None:
    start = time.perf_counter()
    with pytest.raises(SelectorMemoryLimit, match="needed more than 64 MiB"):
        run_bounded(lambda: len(bytearray(512 * 1024 * 1024)), Limits(memory_mb=64))
    assert time.perf_counter() - start < 5


def test_run_bounded_stops_at_the_time_limit() -> None:
    start = time.perf_counter()
    with pytest.raises(SelectorTimeLimit, match="took longer than 0.5 s"):
        run_bounded(lambda: time.sleep(30), Limits(wall_seconds=0.5))
    assert time.perf_counter() - start < 5
    selector = compile_selector(
        "cel.bind(s, 'a', " + "cel.bind(s, s + s, " * 17 + "[" + ", ".join(map(str, range(100))) + "].all(x, ["
        + ", ".join(map(str, range(100))) + "].all(y, size(s) > 0))" + ")" * 18
    )
    assert 1_000 < selector.max_cost <= COST_LIMIT
    start = time.perf_counter()
    with pytest.raises(SelectorTimeLimit, match="the selector took more than 0.3 s of CPU time to evaluate"):
        run_bounded(lambda: selector.matches(Device(driver=DRA)), Limits(seconds=0.3))  # one evaluation: ~6 s
    assert time.perf_counter() - start < 3

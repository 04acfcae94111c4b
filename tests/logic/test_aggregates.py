"""Aggregates (count, sum, min, max) in rule heads, stratification of aggregates, and `/` and float
numbers in rules: checked against a naive Python evaluation written here (sets of tuples, plain
loops) on random inputs, and against clingo when it is installed."""
from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import given, settings, strategies as st

from logic_support import build, reference

from tensorlogic import run
from tensorlogic.logic import (Arith, Const, LogicEngine, LogicError, Name, Rule, StratificationError,
                               parse_atom, parse_rule)


def rule_of(text: str) -> Rule:
    """parse_rule, plus `A ÷ B` as the last head argument: an Arith division term."""
    if "÷" not in text:
        return parse_rule(text)
    head, _, body = text.partition(" <- ")
    left, right = head[head.rindex(",") + 1:-1].split("÷")
    term = Arith("/", *[Const(int(t)) if t.strip().isdigit() else Name(t.strip()) for t in (left, right)])
    rule = parse_rule(head[:head.rindex(",")] + ", Q) <- " + body)
    return Rule(rule.head.__class__(rule.head.relation, rule.head.args[:-1] + (term,)), rule.body)

CLOSURE = ["Path(X, Y) <- Edge(X, Y)", "Path(X, Z) <- Path(X, Y), Edge(Y, Z)"]
AGGREGATES = ["Deg(X, count(Y)) <- Edge(X, Y)",
              "Reach(X, count(Y)) <- Path(X, Y)",
              "Total(G, sum(V)) <- Item(G, I, V)",
              "Lo(G, min(V), max(V)) <- Item(G, _, V)",
              "Items(count(I)) <- Item(_, I, _)",
              "Hub(X) <- Deg(X, D), D >= 2",
              "Half(X, N ÷ 2) <- Reach(X, N)",
              "Mean(G, S ÷ N) <- Total(G, S), Size(G, N)",
              "Size(G, count(I)) <- Item(G, I, _)"]


def naive(edges, items):
    """The expected answers, by direct computation (no engine code)."""
    path = reference({"Edge": edges}, CLOSURE)["Path"] if edges else set()
    out = defaultdict(set)
    succ = defaultdict(set)
    for x, y in edges:
        succ[x].add(y)
    out["Deg"] = {(x, len(ys)) for x, ys in succ.items()}
    reach = defaultdict(set)
    for x, y in path:
        reach[x].add(y)
    out["Reach"] = {(x, len(ys)) for x, ys in reach.items()}
    groups, values = defaultdict(set), defaultdict(set)
    for g, i, v in items:
        groups[g].add((i, v))
        values[g].add(v)
    out["Total"] = {(g, sum(v for _, v in rows)) for g, rows in groups.items()}
    out["Lo"] = {(g, min(vs), max(vs)) for g, vs in values.items()}
    out["Items"] = {(len({i for _, i, _ in items}),)} if items else set()
    out["Hub"] = {(x,) for x, n in out["Deg"] if n >= 2}
    out["Half"] = {(x, n // 2 if n % 2 == 0 else n / 2) for x, n in out["Reach"]}
    size = {g: len({i for i, _ in rows}) for g, rows in groups.items()}
    out["Size"] = set(size.items())
    out["Mean"] = {(g, _number(t / size[g])) for g, t in out["Total"]}
    return out


def _number(value: float):
    return int(value) if float(value).is_integer() else value


ARITY = {"Deg": 2, "Reach": 2, "Total": 2, "Lo": 3, "Items": 1, "Hub": 1, "Half": 2, "Size": 2, "Mean": 2}


@settings(max_examples=40, deadline=None)
@given(edges=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), max_size=16),
       items=st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 5), st.integers(-4, 9)),
                      max_size=10),
       mode=st.sampled_from(["dense", "sparse"]))
def test_aggregates_match_the_naive_evaluation(edges, items, mode):
    edges = sorted(set(edges)) or [(0, 0)]
    items = sorted(set(items)) or [("a", 0, 1)]
    engine = build(mode, {"Edge": edges, "Item": items}, CLOSURE + [rule_of(r) for r in AGGREGATES])
    expected = naive(edges, items)
    for head, arity in ARITY.items():
        query = head + "(" + ", ".join(f"V{i}" for i in range(arity)) + ")"
        got = engine.query(parse_atom(query)).value
        assert sorted(map(str, got)) == sorted(map(str, expected[head])), head
        assert set(got) == expected[head], head


def test_clingo_agrees_on_counts_sums_and_extremes():
    clingo = pytest.importorskip("clingo")
    edges = [(i, (i * 7 + 3) % 23) for i in range(40)] + [(i, (i * 5 + 1) % 23) for i in range(23)]
    items = [("g%d" % (i % 4), i, (i * 37) % 19 - 6) for i in range(30)]
    program = "".join(f"edge({a},{b}). " for a, b in edges) + "".join(f"item({g},{i},{v}). " for g, i, v in items)
    program += """
        path(X,Y) :- edge(X,Y).  path(X,Z) :- path(X,Y), edge(Y,Z).
        reach(X,N) :- path(X,_), N = #count{Y : path(X,Y)}.
        total(G,S) :- item(G,_,_), S = #sum{V,I : item(G,I,V)}.
        lo(G,A) :- item(G,_,_), A = #min{V : item(G,_,V)}.
        hi(G,B) :- item(G,_,_), B = #max{V : item(G,_,V)}.
    """
    control = clingo.Control(["--warn=none"])
    control.add("base", [], program)
    control.ground([("base", [])])
    model = {}
    with control.solve(yield_=True) as handle:
        for m in handle:
            for symbol in m.symbols(atoms=True):
                model.setdefault(symbol.name, set()).add(tuple(
                    a.number if a.type == clingo.SymbolType.Number else a.name for a in symbol.arguments))
    engine = build("sparse", {"Edge": edges, "Item": items},
                   CLOSURE + ["Reach(X, count(Y)) <- Path(X, Y)", "Total(G, sum(V)) <- Item(G, I, V)",
                              "Lo(G, min(V)) <- Item(G, _, V)", "Hi(G, max(V)) <- Item(G, _, V)"])
    for head, name in (("Reach", "reach"), ("Total", "total"), ("Lo", "lo"), ("Hi", "hi")):
        assert set(engine.query(parse_atom(f"{head}(A, B)")).value) == model[name], head


def test_an_aggregate_through_recursion_is_refused_when_defined():
    engine = LogicEngine()
    engine.add_facts("Edge", [(0, 1)])
    engine.add_rule(parse_rule("Path(X, Y) <- Edge(X, Y)"))
    bad = parse_rule("Path(X, count(Y)) <- Path(X, Y)")
    with pytest.raises(StratificationError, match="an aggregate cannot go through recursion"):
        engine.check_rule(bad)
    engine.add_rule(parse_rule("Deg(X, count(Y)) <- Path(X, Y)"))
    engine.add_rule(parse_rule("Path(X, Y) <- Deg(X, Y)"))  # the cycle through the aggregate
    with pytest.raises(StratificationError, match="Deg aggregates over relations that depend on Deg"):
        engine.infer()


def test_misplaced_aggregates_and_bad_values_are_errors():
    engine = LogicEngine()
    engine.add_facts("P", [("a", "b")])
    with pytest.raises(LogicError, match="aggregates go in the head"):
        engine.add_rule(parse_rule("Q(X) <- P(X, count(Y))"))
    engine.add_rule(parse_rule("S(sum(Y)) <- P(_, Y)"))
    with pytest.raises(LogicError, match="aggregates sum\\(Y\\) over 'b', which is not a number"):
        engine.infer()
    zero = LogicEngine()
    zero.add_facts("N", [(0,)])
    zero.add_rule(rule_of("R(X, 1 ÷ X) <- N(X)"))
    with pytest.raises(LogicError, match="divides by zero in `1 / X`"):
        zero.infer()


def test_tl_program_with_aggregates_and_floats():
    program = """
relation Edge(a: node, b: node)
load_relation(Edge, [[1, 2], [1, 3], [2, 3]])
Deg(X, count(Y)) <- Edge(X, Y)
Price(apple, 0.5)
Price(pear, 2)
Qty(apple, 3)
Qty(pear, 5)
Cost(F, P * Q) <- Price(F, P), Qty(F, Q)
Total(sum(C)) <- Cost(_, C)
Per(F, Q / 2) <- Qty(F, Q)
Cheap(F) <- Price(F, P), P < 1
Deg(X, N)?
Total(T)?
Per(F, H)?
Cheap(F)?
print(max(3, 4))
"""
    assert run(program).output.splitlines() == [
        "Deg(X, N): (1, 2), (2, 1)", "Total(T): 11.5", "Per(F, H): (apple, 1.5), (pear, 2.5)",
        "Cheap(F): apple", "4"]
    bad = run("Edge(0, 1)\nPath(X, Y) <- Edge(X, Y)\nPath(X, count(Y)) <- Path(X, Y)\n")
    assert "aggregate cannot go through recursion" in bad.output + str(getattr(bad, "error", ""))

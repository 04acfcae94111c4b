"""Tensor Logic proper: relations as tensors over entity indices, rules as joins + step functions,
evaluated by semi-naive forward chaining to a fixpoint (see engine.py for the interpreter's API)."""
from .engine import LogicEngine, StratumStats
from .errors import (ArityError, ConvergenceError, LogicError, LogicTypeError, StratificationError,
                     UnknownRelationError, UnsafeRuleError)
from .query import QueryResult
from .terms import AGGREGATE_OPS, ARITH_OPS, Aggregate, Arith, Atom, Comparison, Const, Name, Rule, Var, parse_atom, parse_rule

__all__ = [
    "LogicEngine", "StratumStats", "QueryResult", "AGGREGATE_OPS", "ARITH_OPS", "Aggregate", "Arith", "Atom", "Comparison", "Const", "Name", "Rule", "Var",
    "parse_atom", "parse_rule", "LogicError", "ArityError", "ConvergenceError", "LogicTypeError",
    "StratificationError", "UnknownRelationError", "UnsafeRuleError",
]

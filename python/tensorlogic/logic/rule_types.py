"""Typing and resolution of logic rules: which names are variables, which entity type each argument
slot and each rule variable has, and the checks that go with it (unknown relation, arity, safety,
conflicting types). LogicEngine (engine.py) compiles rules with what `type_rules` returns.

Invariant: pure functions of the relations, the rules and the known constants: nothing here changes
an engine, a domain or a fact (`type_rules` returns the slot types; the engine stores them).
"""
from __future__ import annotations

from .errors import ArityError, LogicTypeError, UnknownRelationError, UnsafeRuleError
from .safety import existential_variables
from .terms import Atom, Comparison, Const, Rule, Var

DEFAULT_ENTITY_TYPE = "entity"


class TypeClasses:
    """Union-find over argument slots and rule variables, each class with at most one type."""

    def __init__(self):
        self.parent: dict = {}
        self.fixed_type: dict = {}
        self.origin: dict = {}  # class root -> text saying where its type came from

    def find(self, node):
        self.parent.setdefault(node, node)
        root = node
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[node] != root:
            self.parent[node], node = root, self.parent[node]
        return root

    def fix(self, node, type_name: str, origin: str):
        root = self.find(node)
        self.fixed_type[root] = type_name
        self.origin[root] = origin

    def union(self, a, b, describe_conflict):
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return
        ta, tb = self.fixed_type.get(ra), self.fixed_type.get(rb)
        if ta is not None and tb is not None and ta != tb:
            raise describe_conflict(ta, self.origin[ra], tb, self.origin[rb])
        self.parent[rb] = ra
        if ta is None and tb is not None:
            self.fixed_type[ra] = tb
            self.origin[ra] = self.origin[rb]

    def type_of(self, node) -> str | None:
        return self.fixed_type.get(self.find(node))


def arguments_text(count: int) -> str:
    return f"{count} argument" + ("" if count == 1 else "s")


def resolve_term(term, known: set):
    """A bare name is a variable when it is `_` or capitalized and no constant of that name is
    known; otherwise a constant. Var and Const stay what they are."""
    if isinstance(term, (Var, Const)):
        return term
    text = term.text
    if text == "_" or ((text[0].isupper() or text[0] == "_") and text not in known):
        return Var(text, term.pos)
    return Const(text, term.pos)


def comparison_type(classes: TypeClasses, rule_index: int, left, right) -> str:
    for side in (left, right):
        if isinstance(side, int):
            return classes.type_of(("var", rule_index, side)) or DEFAULT_ENTITY_TYPE
    return DEFAULT_ENTITY_TYPE


def resolve_rule(relations: dict, rule_index: int, rule: Rule, known: set, classes: TypeClasses):
    """Check the rule's relations, arities and safety; number its variables; unify types."""
    var_ids: dict[str, int] = {}
    var_names: list[str] = []
    atoms = []
    existential = existential_variables(rule, lambda t: isinstance(resolve_term(t, known), Var))

    def var_id(name: str) -> int:
        if name == "_" or name in existential:
            var_names.append(f"_#{len(var_names)}")
            return len(var_names) - 1
        if name not in var_ids:
            var_ids[name] = len(var_names)
            var_names.append(name)
        return var_ids[name]

    for atom in (rule.head,) + tuple(b for b in rule.body if isinstance(b, Atom)):
        info = relations.get(atom.relation)
        where = atom.pos or rule.pos
        if info is None:
            raise UnknownRelationError(f"unknown relation {atom.relation} in rule `{rule}` "
                                       f"(declare it with `relation` or give it facts)", where)
        if info.arity != len(atom.args):
            raise ArityError(f"{atom.relation} takes {arguments_text(info.arity)}, but rule `{rule}` "
                             f"gives it {len(atom.args)}", where)
        terms = []
        for i, term in enumerate(atom.args):
            resolved = resolve_term(term, known)
            if isinstance(resolved, Var):
                vid = var_id(resolved.name)
                terms.append(vid)
                shown = resolved.name

                def conflict(t1, o1, t2, o2, shown=shown):
                    return LogicTypeError(f"variable {shown} in rule `{rule}` is used both as "
                                          f"{t1} ({o1}) and as {t2} ({o2})", where)

                classes.union(("var", rule_index, vid), ("slot", atom.relation, i), conflict)
            else:
                terms.append(resolved)
        atoms.append((atom, terms))

    positive_vars = {t for atom, terms in atoms[1:] if not atom.negated for t in terms
                     if isinstance(t, int)}
    head_atom, head_terms = atoms[0]
    for t in head_terms:
        if isinstance(t, int) and t not in positive_vars:
            name = var_names[t] if not var_names[t].startswith("_#") else "_"
            raise UnsafeRuleError(f"variable {name} in the head of rule `{rule}` does not occur "
                                  f"in a positive body atom", rule.pos or head_atom.pos)
    for atom, terms in atoms[1:]:
        if atom.negated:
            for t in terms:
                if isinstance(t, int) and t not in positive_vars and not var_names[t].startswith("_#"):
                    raise UnsafeRuleError(f"variable {var_names[t]} of `{atom}` in rule `{rule}` "
                                          f"does not occur in a positive body atom", atom.pos or rule.pos)
    comparisons = []
    for item in rule.body:
        if not isinstance(item, Comparison):
            continue
        sides = []
        for term in (item.left, item.right):
            resolved = resolve_term(term, known)
            if isinstance(resolved, Var):
                vid = var_ids.get(resolved.name)
                if vid is None or vid not in positive_vars:
                    raise UnsafeRuleError(f"variable {resolved.name} of `{item}` in rule `{rule}` "
                                          f"does not occur in a positive body atom", item.pos or rule.pos)
                sides.append(vid)
            else:
                sides.append(resolved)
        if isinstance(sides[0], int) and isinstance(sides[1], int):
            def conflict(t1, o1, t2, o2, item=item):
                return LogicTypeError(f"`{item}` in rule `{rule}` compares a {t1} ({o1}) with a "
                                      f"{t2} ({o2})", item.pos or rule.pos)
            classes.union(("var", rule_index, sides[0]), ("var", rule_index, sides[1]), conflict)
        comparisons.append((item, sides[0], sides[1]))
    return rule, atoms, var_names, comparisons


def type_rules(relations: dict, rules: list, known: set) -> tuple[list, TypeClasses, dict]:
    """Resolve every rule (resolve_rule) with the types of declared or fact-typed relations fixed;
    returns (resolved rules, the type classes, {(relation, slot): entity type} for every slot)."""
    classes = TypeClasses()
    for info in relations.values():
        if info.types is not None:
            for i, type_name in enumerate(info.types):
                how = "declared" if info.declared else "given by its facts"
                classes.fix(("slot", info.name, i), type_name,
                            f"argument {i + 1} of {info.name} ({how})")
    resolved_rules = []
    for rule_index, rule in enumerate(rules):
        resolved_rules.append(resolve_rule(relations, rule_index, rule, known, classes))
    slot_types = {}
    for info in relations.values():
        for i in range(info.arity):
            slot_types[(info.name, i)] = classes.type_of(("slot", info.name, i)) or DEFAULT_ENTITY_TYPE
    return resolved_rules, classes, slot_types

"""Common-subexpression elimination on a generated action, at load time.

p4c's copy propagation hands BMv2 expression trees that repeat whole subtrees (the 64-lane
saturating add computes each lane's sum several times). This pass rewrites a generated
action function so a repeated pure subexpression is computed once into a local
(`(_cN := ...)`) and reused while none of the locals it reads has been reassigned. Only
straight-line code creates such locals: not the arms of `x if c else y`, not the right
side of `and`/`or`, not the body of an `if` (a body may only reuse what was computed
before it). Two passes: the first counts reuses, the second rewrites only what is reused.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

_PURE_CALLS = {"min", "max", "_shl", "_shr", "_div", "_mod"}

Info = tuple[ast.AST, str, bool, frozenset[str]]  # (node kept alive, key, reusable?, locals read)


def _annotate(root: ast.AST, intern: dict[str, str]) -> dict[int, Info]:
    """Structural key, reusability and reads of every expression node, bottom-up in one walk.

    Keys are interned to short ids (`intern` is shared by both passes, so equal
    structures get equal keys in both trees).
    """
    out: dict[int, Info] = {}

    def visit(node: ast.AST) -> tuple[str, bool, frozenset[str]]:
        kids = []
        for c in ast.iter_child_nodes(node):
            r = visit(c)
            if isinstance(c, ast.expr):
                kids.append(r)
        pure = all(k[1] for k in kids)
        reads: frozenset[str] = frozenset().union(*(k[2] for k in kids)) if kids else frozenset()
        inner = ",".join(k[0] for k in kids)
        compound = True
        if isinstance(node, ast.Name):
            raw, reads, compound = f"N:{node.id}", frozenset([node.id]), False
        elif isinstance(node, ast.Constant):
            raw, compound = f"C:{node.value!r}", False
        elif isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant):
            raw, compound = f"C:-{node.operand.value!r}", False  # a negative literal
        elif isinstance(node, ast.BinOp):
            raw = f"B{type(node.op).__name__}({inner})"
        elif isinstance(node, ast.UnaryOp):
            raw = f"U{type(node.op).__name__}({inner})"
        elif isinstance(node, ast.Compare):
            raw = f"Cmp{'/'.join(type(o).__name__ for o in node.ops)}({inner})"
        elif isinstance(node, ast.IfExp):
            raw = f"If({inner})"
        elif isinstance(node, ast.BoolOp):
            raw = f"Bo{type(node.op).__name__}({inner})"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _PURE_CALLS:
            raw = f"Call({inner})"
        else:  # subscripts (F, registers), other calls, statements: never reused
            raw, pure, compound = f"X{id(node)}", False, False
        key = intern.setdefault(raw, f"k{len(intern)}")
        if isinstance(node, ast.expr):
            out[id(node)] = (node, key, pure and compound, reads)
        return key, pure, reads

    visit(root)
    return out


def _assigned(stmts: list[ast.stmt]) -> set[str]:
    """Locals a statement list assigns (not the pass's own `_cN :=` locals, which never change)."""
    out: set[str] = set()
    for s in stmts:
        for sub in ast.walk(s):
            if isinstance(sub, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
                for t in targets:
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                            out.add(n.id)
    return out


@dataclass
class _State:
    avail: dict[str, tuple[str, int]] = field(default_factory=dict)  # key -> (local, generation)
    by_name: dict[str, set[str]] = field(default_factory=dict)  # local read -> keys that read it

    def add(self, key: str, local: str, gen: int, reads: frozenset[str]) -> None:
        self.avail[key] = (local, gen)
        for name in reads:
            self.by_name.setdefault(name, set()).add(key)

    def invalidate(self, names: set[str]) -> None:
        for name in names:
            for key in self.by_name.pop(name, ()):
                self.avail.pop(key, None)


class _Pass:
    """Pass 1 (uses=None) counts the uses of each generation; pass 2 rewrites the ones used twice."""

    def __init__(self, uses: dict[int, int] | None, info: dict[int, Info]) -> None:
        self.emit = uses is not None
        self.uses: dict[int, int] = uses if uses is not None else {}
        self.info = info
        self.next_gen = 0

    def expr(self, node: ast.expr, st: _State, certain: bool) -> ast.expr:
        _, key, candidate, reads = self.info[id(node)]
        if candidate:
            hit = st.avail.get(key)
            if hit is not None:  # reused whole: its children are not looked at again
                local, gen = hit
                if not self.emit:
                    self.uses[gen] = self.uses.get(gen, 1) + 1
                    return node
                return ast.Name(id=local, ctx=ast.Load()) if self.uses.get(gen, 1) >= 2 else node
        # a first occurrence: children first, so their own repeats are found
        if isinstance(node, ast.IfExp):
            node.test = self.expr(node.test, st, certain)
            node.body = self.expr(node.body, st, False)
            node.orelse = self.expr(node.orelse, st, False)
        elif isinstance(node, ast.BoolOp):
            node.values = [self.expr(v, st, certain and i == 0) for i, v in enumerate(node.values)]
        else:
            for name, value in ast.iter_fields(node):
                if isinstance(value, ast.expr):
                    setattr(node, name, self.expr(value, st, certain))
                elif isinstance(value, list):
                    setattr(node, name, [self.expr(v, st, certain) if isinstance(v, ast.expr) else v for v in value])
        if not candidate or not certain:
            return node
        gen = self.next_gen
        self.next_gen += 1
        local = f"_c{gen}"
        st.add(key, local, gen, reads)
        if self.emit and self.uses.get(gen, 1) >= 2:
            return ast.NamedExpr(target=ast.Name(id=local, ctx=ast.Store()), value=node)
        return node

    def block(self, stmts: list[ast.stmt], st: _State, straight: bool) -> list[ast.stmt]:
        for s in stmts:
            if isinstance(s, ast.Assign):
                s.value = self.expr(s.value, st, straight)
                for t in s.targets:
                    if isinstance(t, ast.Subscript):
                        t.slice = self.expr(t.slice, st, straight)
            elif isinstance(s, ast.If):
                s.test = self.expr(s.test, st, straight)
                self.block(s.body, st, False)
                self.block(s.orelse, st, False)
            elif isinstance(s, ast.Expr):
                s.value = self.expr(s.value, st, straight)
            st.invalidate(_assigned([s]))
        return stmts


def eliminate(source: str) -> str:
    """Rewrite one generated `def` so repeated pure subexpressions are computed once."""
    tree = ast.parse(source)
    fn = tree.body[0]
    if not isinstance(fn, ast.FunctionDef):
        return source
    intern: dict[str, str] = {}
    counting = ast.parse(source)
    first = _Pass(None, _annotate(counting, intern))
    first.block(counting.body[0].body, _State(), True)  # type: ignore[attr-defined]
    second = _Pass(first.uses, _annotate(tree, intern))
    second.block(fn.body, _State(), True)
    ast.fix_missing_locations(tree)
    return ast.unparse(tree)

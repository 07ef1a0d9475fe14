"""The mutation operators and the mutants they generate (specs/mutation.md, the operator table).

Inside the body of every function in scope each operator makes one mutant per place it
applies; in every module-level table in scope, ``table`` deletes one entry at a time. A mutant
is named by its :attr:`Mutant.key` (file, unit, operator, the line's text, the change), which
survives code moving around.
"""

from __future__ import annotations
import __future__ as future_flags

import ast
import copy
import types
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from tests.support.mutation import scope
from tests.support.mutation.scope import FunctionSource

Path_ = tuple[tuple[str, int | None], ...]

# Statements that are never deleted: a deleted return falls through to None (a crash any test
# sees), an assert checks an invariant the code already keeps, pass is nothing.
KEPT_STATEMENTS = (
    ast.Return,
    ast.Assert,
    ast.Pass,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Global,
    ast.Nonlocal,
)

CMP_FLIP: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
CMP_SYM = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.Is: "is",
    ast.IsNot: "is not",
}
# Comparisons whose negation is exactly the flipped comparison the cmp operator makes: a
# negated condition of one of these alone would repeat that mutant.
SELF_NEGATING = (ast.Eq, ast.NotEq, ast.In, ast.NotIn, ast.Is, ast.IsNot)
BUILTIN_SWAP = {"any": "all", "all": "any", "min": "max", "max": "min"}
# Calls whose arguments are not swapped: the result is the same (min, max), or the call
# raises TypeError whatever the values (a type where an object belongs): no test to learn from.
NO_SWAP = frozenset({"min", "max", "isinstance", "issubclass", "getattr", "hasattr", "setattr"})

OPERATORS = (
    "cmp",
    "const",
    "bool",
    "boolop",
    "kwarg",
    "stmt",
    "negate",
    "builtin",
    "elif",
    "args",
    "return",
    "loop",
    "str",
    "table",
)
# The operators the runner had first: the CI sample of the guard functions draws from them and
# from the others alike (specs/mutation.md, "The CI run").
FIRST_OPERATORS = OPERATORS[:6]


@dataclass(frozen=True)
class Mutant:
    file: str
    function: str  # qualified name of the top-level function or method, or the table's name
    line: int
    op: str  # one of OPERATORS
    site: str  # the source line, stripped
    change: str  # what the operator did, e.g. "'<' -> '<='"
    guard: bool
    ordinal: int  # among mutants with the same file, function, op, site and change
    path: Path_  # where in the unit's AST
    edit: int  # which of the operators' edits at that node

    @property
    def key(self) -> str:
        """Stable across line moves: names the function, the operator, the line's text and the
        change (and an ordinal when the same change fits the same line twice)."""
        tail = f" #{self.ordinal}" if self.ordinal > 1 else ""
        return f"{self.file} | {self.function} | {self.op} | {self.site} | {self.change}{tail}"

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def child_nodes(node: ast.AST) -> Iterator[tuple[str, int | None, ast.AST]]:
    for name, value in ast.iter_fields(node):
        if isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, ast.AST):
                    yield name, i, item
        elif isinstance(value, ast.AST):
            yield name, None, value


def walk(node: ast.AST, path: Path_) -> Iterator[tuple[ast.AST, Path_]]:
    """Every node under ``node`` with its path, skipping what is never mutated: nested
    function signatures (defaults are evaluated at import), decorators, annotations, asserts."""
    for name, i, child in child_nodes(node):
        if name in ("decorator_list", "returns", "annotation") or isinstance(child, ast.arguments):
            continue
        if isinstance(child, ast.Assert):
            continue
        sub = (*path, (name, i))
        yield child, sub
        yield from walk(child, sub)


def resolve(root: ast.AST, path: Sequence[tuple[str, int | None]]) -> ast.AST:
    node = root
    for name, i in path:
        value = getattr(node, name)
        node = value[i] if i is not None else value
    return node


def replace(root: ast.AST, path: Sequence[tuple[str, int | None]], new: ast.AST | None) -> None:
    parent = resolve(root, path[:-1])
    name, i = path[-1]
    if i is None:
        assert new is not None
        setattr(parent, name, new)
    else:
        seq = getattr(parent, name)
        if new is None:
            del seq[i]
        else:
            seq[i] = new


def is_docstring(stmt: ast.AST) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def short(node: ast.AST, limit: int = 60) -> str:
    text = ast.unparse(node).split("\n")[0]
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class Edit:
    op: str
    change: str
    apply: Callable[[ast.AST], None]


def _at(path: Path_, kind: type[ast.AST] | tuple[type[ast.AST], ...], root: ast.AST) -> ast.AST:
    target = resolve(root, path)
    assert isinstance(target, kind), (path, type(target))
    return target


def first_parameter(fs: FunctionSource) -> str | None:
    """The function's input, for ``return`` (the input unchanged): its first parameter, not
    ``self`` or ``cls`` of a method."""
    node = fs.node
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    params = [*node.args.posonlyargs, *node.args.args]
    if fs.class_name is not None and params and params[0].arg in ("self", "cls"):
        params = params[1:]
    return params[0].arg if params else None


def _expression_edits(node: ast.AST, path: Path_) -> Iterator[Edit]:
    """cmp, const, bool, boolop, kwarg, builtin, args, str: the edits of an expression."""
    if isinstance(node, ast.Compare):
        for k, cop in enumerate(node.ops):
            new_op = CMP_FLIP[type(cop)]

            def flip(fn: ast.AST, k: int = k, new_op: type[ast.cmpop] = new_op) -> None:
                target = _at(path, ast.Compare, fn)
                assert isinstance(target, ast.Compare)
                target.ops[k] = new_op()

            yield Edit("cmp", f"'{CMP_SYM[type(cop)]}' -> '{CMP_SYM[new_op]}'", flip)
    elif isinstance(node, ast.Constant) and isinstance(node.value, bool):

        def negate(fn: ast.AST) -> None:
            target = _at(path, ast.Constant, fn)
            assert isinstance(target, ast.Constant)
            target.value = not target.value

        yield Edit("bool", f"{node.value} -> {not node.value}", negate)
    elif isinstance(node, ast.Constant) and isinstance(node.value, int):
        for delta in (1, -1):

            def move(fn: ast.AST, delta: int = delta) -> None:
                target = _at(path, ast.Constant, fn)
                assert isinstance(target, ast.Constant) and isinstance(target.value, int)
                target.value = target.value + delta

            yield Edit("const", f"{node.value} -> {node.value + delta}", move)
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        new = f"XX{node.value}XX"

        def change_text(fn: ast.AST, new: str = new) -> None:
            target = _at(path, ast.Constant, fn)
            assert isinstance(target, ast.Constant)
            target.value = new

        yield Edit("str", f"{short(node, 40)} -> {short(ast.Constant(new), 44)}", change_text)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):

        def drop_not(fn: ast.AST) -> None:
            target = _at(path, ast.UnaryOp, fn)
            assert isinstance(target, ast.UnaryOp)
            replace(fn, path, target.operand)

        yield Edit("bool", f"not {short(node.operand, 40)} -> {short(node.operand, 40)}", drop_not)
    elif isinstance(node, ast.BoolOp):
        word = "and" if isinstance(node.op, ast.And) else "or"
        for k, operand in enumerate(node.values):

            def drop(fn: ast.AST, k: int = k) -> None:
                target = _at(path, ast.BoolOp, fn)
                assert isinstance(target, ast.BoolOp)
                rest = [v for j, v in enumerate(target.values) if j != k]
                replace(
                    fn, path, rest[0] if len(rest) == 1 else ast.BoolOp(op=target.op, values=rest)
                )

            yield Edit("boolop", f"{word}: drop {short(operand, 50)}", drop)
    elif isinstance(node, ast.Call):
        for k, kw in enumerate(node.keywords):
            if kw.arg is None:
                continue

            def remove(fn: ast.AST, k: int = k) -> None:
                target = _at(path, ast.Call, fn)
                assert isinstance(target, ast.Call)
                del target.keywords[k]

            yield Edit("kwarg", f"drop {kw.arg}=", remove)
        if isinstance(node.func, ast.Name) and node.func.id in BUILTIN_SWAP:
            other = BUILTIN_SWAP[node.func.id]

            def swap_builtin(fn: ast.AST, other: str = other) -> None:
                target = _at(path, ast.Call, fn)
                assert isinstance(target, ast.Call) and isinstance(target.func, ast.Name)
                target.func = ast.Name(id=other, ctx=ast.Load())

            yield Edit("builtin", f"{node.func.id} -> {other}", swap_builtin)
        args = (
            node.args if not (isinstance(node.func, ast.Name) and node.func.id in NO_SWAP) else []
        )
        for k in range(len(args) - 1):
            a, b = args[k], args[k + 1]
            if isinstance(a, ast.Starred) or isinstance(b, ast.Starred):
                continue
            if ast.dump(a) == ast.dump(b):
                continue

            def swap(fn: ast.AST, k: int = k) -> None:
                target = _at(path, ast.Call, fn)
                assert isinstance(target, ast.Call)
                target.args[k], target.args[k + 1] = target.args[k + 1], target.args[k]

            yield Edit("args", f"swap {short(a, 25)} <-> {short(b, 25)}", swap)


def _statement_edits(node: ast.AST, path: Path_, fs: FunctionSource, top: bool) -> Iterator[Edit]:
    """negate, elif, return, loop: the edits of a statement (or a conditional expression)."""
    if isinstance(node, (ast.If, ast.While, ast.IfExp)):
        test = node.test
        self_negating = (
            isinstance(test, ast.Compare)
            and len(test.ops) == 1
            and isinstance(test.ops[0], SELF_NEGATING)
        )
        if (
            not (isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not))
            and not self_negating
        ):

            def negate(fn: ast.AST) -> None:
                target = _at(path, (ast.If, ast.While, ast.IfExp), fn)
                assert isinstance(target, (ast.If, ast.While, ast.IfExp))
                target.test = ast.UnaryOp(op=ast.Not(), operand=target.test)

            yield Edit("negate", f"negate {short(test, 50)}", negate)
    if isinstance(node, ast.If) and len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
        inner = node.orelse[0]

        def drop_elif(fn: ast.AST) -> None:
            target = _at(path, ast.If, fn)
            assert isinstance(target, ast.If)
            nested = target.orelse[0]
            assert isinstance(nested, ast.If)
            target.orelse = nested.orelse

        yield Edit("elif", f"drop elif {short(inner.test, 50)}", drop_elif)
    if isinstance(node, ast.Return) and node.value is not None:
        value = node.value
        if not (isinstance(value, ast.Constant) and value.value is None):

            def none(fn: ast.AST) -> None:
                target = _at(path, ast.Return, fn)
                assert isinstance(target, ast.Return)
                target.value = ast.Constant(value=None)

            yield Edit("return", "return None", none)
        param = first_parameter(fs) if top else None
        if param is not None and not (isinstance(value, ast.Name) and value.id == param):

            def same(fn: ast.AST, param: str = param) -> None:
                target = _at(path, ast.Return, fn)
                assert isinstance(target, ast.Return)
                target.value = ast.Name(id=param, ctx=ast.Load())

            yield Edit("return", f"return {param}", same)
    if isinstance(node, (ast.Break, ast.Continue)):
        word, other = (
            ("break", "continue") if isinstance(node, ast.Break) else ("continue", "break")
        )

        def swap_loop(fn: ast.AST) -> None:
            target = _at(path, (ast.Break, ast.Continue), fn)
            replace(
                fn,
                path,
                ast.copy_location(
                    ast.Continue() if isinstance(target, ast.Break) else ast.Break(), target
                ),
            )

        yield Edit("loop", f"{word} -> {other}", swap_loop)
    if (
        isinstance(node, ast.stmt)
        and not isinstance(node, KEPT_STATEMENTS)
        and not is_docstring(node)
        and path[-1][1] is not None
    ):

        def delete(fn: ast.AST) -> None:
            target = resolve(fn, path)
            replace(fn, path, ast.copy_location(ast.Pass(), target))

        yield Edit("stmt", f"delete {short(node)}", delete)


def _inside_nested_function(root: ast.AST, path: Path_) -> bool:
    node = root
    for name, i in path[:-1]:
        value = getattr(node, name)
        node = value[i] if i is not None else value
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return True
    return False


def edits(fs: FunctionSource, node: ast.AST, path: Path_) -> Iterator[Edit]:
    """The operators that apply at ``node`` of the unit ``fs``."""
    if fs.kind == "table":
        yield from table_edits(node, path)
        return
    if not (isinstance(node, ast.Constant) and _not_text(fs.node, path)):
        yield from _expression_edits(node, path)
    yield from _statement_edits(node, path, fs, top=not _inside_nested_function(fs.node, path))


def _not_text(root: ast.AST, path: Path_) -> bool:
    """A constant that is no text a user reads or a test can see: a string statement (a
    docstring, a string used as a comment) or a piece of an f-string's format spec."""
    if any(name == "format_spec" for name, _ in path):
        return True
    return bool(path) and isinstance(resolve(root, path[:-1]), ast.Expr)


def _rows(seq: ast.Tuple | ast.List | ast.Set) -> bool:
    """A sequence of rows (tuples of the same length): its entries are the rows, whose own
    items are not entries (deleting a row's field would only break its unpacking)."""
    elts = seq.elts
    return (
        bool(elts)
        and all(isinstance(e, ast.Tuple) for e in elts)
        and len({len(e.elts) for e in elts if isinstance(e, ast.Tuple)}) == 1
    )


def table_edits(node: ast.AST, path: Path_) -> Iterator[Edit]:
    """table: delete one entry of a dict, tuple, list or set literal of a module-level table."""
    if isinstance(node, ast.Dict):
        for k, key in enumerate(node.keys):
            shown = f"**{short(node.values[k], 40)}" if key is None else short(key, 40)

            def drop_item(tree: ast.AST, k: int = k) -> None:
                target = _at(path, ast.Dict, tree)
                assert isinstance(target, ast.Dict)
                del target.keys[k]
                del target.values[k]

            yield Edit("table", f"delete entry {shown}", drop_item)
    elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        for k, elt in enumerate(node.elts):
            if isinstance(elt, ast.Starred):
                continue

            def drop_elt(tree: ast.AST, k: int = k) -> None:
                target = _at(path, (ast.Tuple, ast.List, ast.Set), tree)
                assert isinstance(target, (ast.Tuple, ast.List, ast.Set))
                del target.elts[k]
                if isinstance(target, ast.Set) and not target.elts:  # {} is a dict
                    replace(tree, path, ast.Call(ast.Name("set", ast.Load()), [], []))

            yield Edit("table", f"delete entry {short(elt, 40)}", drop_elt)


def table_nodes(node: ast.AST, path: Path_) -> Iterator[tuple[ast.AST, Path_]]:
    """``node`` and the nodes under it that hold entries: literals, not type expressions or
    lambdas, and not the fields of a row."""
    yield node, path
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and _rows(node):
        return
    for name, i, child in child_nodes(node):
        if isinstance(child, (ast.Subscript, ast.Lambda, ast.comprehension)):
            continue
        yield from table_nodes(child, (*path, (name, i)))


def declared_unreachable(node: ast.AST, lines: Sequence[str]) -> bool:
    """A statement the code declares never runs: marked ``# pragma: no cover`` (the
    ladders' "the last rung always ends the round"), or an ``assert_never(...)`` call (there
    for the type checker's exhaustiveness check). Mutating it can change no behaviour a test
    could see, so no mutant is made of it or of anything inside it."""
    if not isinstance(node, ast.stmt):
        return False
    if "pragma: no cover" in lines[node.lineno - 1]:
        return True
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id == "assert_never"
    )


def _places(fs: FunctionSource, lines: Sequence[str]) -> Iterator[tuple[ast.AST, Path_]]:
    """Every node of the unit an operator may change, with its path."""
    if fs.kind == "table":
        assert isinstance(fs.node, (ast.Assign, ast.AnnAssign)) and fs.node.value is not None
        yield from table_nodes(fs.node.value, (("value", None),))
        return
    assert isinstance(fs.node, (ast.FunctionDef, ast.AsyncFunctionDef))
    for stmt_i, stmt in enumerate(fs.node.body):
        if (stmt_i == 0 and is_docstring(stmt)) or isinstance(stmt, ast.Assert):
            continue
        top: Path_ = (("body", stmt_i),)
        skipped: list[tuple[int, int]] = []  # line ranges declared unreachable
        for node, path in [(stmt, top), *walk(stmt, top)]:
            at: int | None = getattr(node, "lineno", None)
            if at is not None and any(a <= at <= b for a, b in skipped):
                continue
            if declared_unreachable(node, lines):
                assert isinstance(node, ast.stmt)
                skipped.append((node.lineno, node.end_lineno or node.lineno))
                continue
            yield node, path


def generate(
    functions: Sequence[FunctionSource] | None = None, ops: Sequence[str] = OPERATORS
) -> list[Mutant]:
    """Every mutant of every unit in scope (of the operators ``ops``), in source order."""
    out: list[Mutant] = []
    wanted = set(ops)
    for fs in functions if functions is not None else scope.functions_in_scope():
        lines = (scope.ROOT / fs.file).read_text(encoding="utf-8").split("\n")
        seen: dict[tuple[str, str, str], int] = defaultdict(int)
        for node, path in _places(fs, lines):
            for k, edit in enumerate(edits(fs, node, path)):
                if edit.op not in wanted:
                    continue
                line = getattr(node, "lineno", fs.node.lineno)
                site = lines[line - 1].strip()
                seen[(edit.op, site, edit.change)] += 1
                out.append(
                    Mutant(
                        file=fs.file,
                        function=fs.qualname,
                        line=line,
                        op=edit.op,
                        site=site,
                        change=edit.change,
                        guard=fs.guard,
                        ordinal=seen[(edit.op, site, edit.change)],
                        path=path,
                        edit=k,
                    )
                )
    return out


def mutated_function(m: Mutant, fs: FunctionSource) -> ast.stmt:
    """A copy of the unit's AST (function or table assignment) with the mutant applied."""
    fn = copy.deepcopy(fs.node)
    found = list(edits(fs, resolve(fs.node, m.path), m.path))
    if m.edit >= len(found) or (found[m.edit].op, found[m.edit].change) != (m.op, m.change):
        raise LookupError(f"mutant {m.key} no longer applies")
    found[m.edit].apply(fn)
    return fn


def compile_function(fs: FunctionSource, fn: ast.stmt) -> types.CodeType:
    """Compile ``fn`` as it would be in its module (same file name, line numbers, qualname);
    a table's assignment compiles to the code of its module-level statement."""
    body: ast.stmt = fn
    if fs.class_name is not None:
        body = ast.ClassDef(name=fs.class_name, bases=[], keywords=[], body=[fn], decorator_list=[])
        ast.copy_location(body, fn)
    mod = ast.Module(body=[body], type_ignores=[])
    ast.fix_missing_locations(mod)
    flags = future_flags.annotations.compiler_flag if fs.future_annotations else 0
    code: types.CodeType = compile(
        mod, str(scope.ROOT / fs.file), "exec", flags=flags, dont_inherit=True
    )
    if fs.kind == "table":
        return code
    for const in all_code(code):
        if const.co_qualname == fs.qualname:
            return const
    raise LookupError(f"no code for {fs.qualname}")  # pragma: no cover


def all_code(code: types.CodeType) -> Iterator[types.CodeType]:
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield c
            yield from all_code(c)


def mutated_module(m: Mutant, fs: FunctionSource) -> str:
    """The whole module's source with the mutant applied (via the AST: comments are lost,
    behaviour is not)."""
    tree = ast.parse((scope.ROOT / fs.file).read_text(encoding="utf-8"))
    new = mutated_function(m, fs)
    if fs.class_name is None:
        holders = [tree.body]
    else:
        holders = [
            n.body for n in tree.body if isinstance(n, ast.ClassDef) and n.name == fs.class_name
        ]
    for holder in holders:
        for k, sub in enumerate(holder):
            if type(sub) is type(fs.node) and sub.lineno == fs.node.lineno:
                holder[k] = new
                return ast.unparse(tree) + "\n"
    raise LookupError(f"{fs.qualname} not found in {fs.file}")  # pragma: no cover

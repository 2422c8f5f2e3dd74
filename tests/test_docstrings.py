"""Every public callable documents its parameters in a numpydoc ``Parameters`` section.

The rule, for every callable in the ``__all__`` of the packages below:

* every parameter of its signature (for a class, of ``inspect.signature(cls)``: the
  ``__init__`` or dataclass fields; ``self``/``cls`` excluded) appears in the docstring's
  ``Parameters`` section as a line ``name : type`` (or ``name1, name2 : type``; ``*args`` and
  ``**kwargs`` written with their stars);
* a function that returns something has a ``Returns`` (or ``Yields``) section;
* classes whose signature is inherited from ``object``, ``BaseException`` or
  ``typing.Protocol`` (nothing of their own to document) are skipped.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import textwrap
import typing

import pytest

PACKAGES = [
    "gpucontrol",
    "gpucontrol.node",
    "gpucontrol.node.actuators",
    "sysid",
    "harness.cluster",
]

_SECTION = re.compile(r"^(\w[\w ]*)\n-{3,}\s*$", re.MULTILINE)
_PARAM_LINE = re.compile(r"^(\*{0,2}\w+(?:\s*,\s*\*{0,2}\w+)*)\s*:")
_INHERITED_FROM = (object, BaseException, Exception, typing.Protocol, typing.Generic)


def sections(doc: str) -> dict[str, str]:
    """Numpydoc sections of a (dedented) docstring: title -> body."""
    out: dict[str, str] = {}
    heads = list(_SECTION.finditer(doc))
    for i, m in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(doc)
        out[m.group(1).strip()] = doc[m.end():end]
    return out


def documented_parameters(doc: str) -> set[str]:
    """Names on ``name : type`` lines (at the section's own indentation) of ``Parameters``."""
    body = sections(doc).get("Parameters", "")
    names: set[str] = set()
    for line in body.splitlines():
        if not line.strip() or line[:1].isspace():
            continue
        m = _PARAM_LINE.match(line)
        if m:
            names.update(n.strip() for n in m.group(1).split(","))
    return names


def _signature_owner(cls: type) -> type | None:
    """The class in ``cls``'s MRO that defines the constructor signature."""
    for klass in cls.__mro__:
        if "__init__" in vars(klass) or "__new__" in vars(klass) or \
                "__signature__" in vars(klass):
            return klass
    return None


def _returns_value(func: typing.Callable) -> bool:
    """Whether ``func`` returns something: a return annotation other than None, or (without
    one) a ``return <value>`` in its own body."""
    try:
        hints = func.__annotations__
    except AttributeError:
        hints = {}
    if "return" in hints:
        return hints["return"] not in (None, "None", type(None))
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    except (OSError, TypeError, SyntaxError):
        return False
    fn = tree.body[0]
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Return) and node.value is not None:
            return True
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return True
        stack.extend(ast.iter_child_nodes(node))
    return False


def problems(obj: typing.Any) -> list[str]:
    """What ``obj``'s docstring lacks under the rule (empty when it complies)."""
    doc = inspect.getdoc(obj) or ""
    if inspect.isclass(obj):
        owner = _signature_owner(obj)
        if owner is None or owner in _INHERITED_FROM or owner.__module__ == "typing":
            return []
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return []
    have = documented_parameters(doc)
    out = []
    for p in sig.parameters.values():
        if p.name in ("self", "cls"):
            continue
        name = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "") + p.name
        if name not in have:
            out.append(f"parameter {name!r} is not documented as '{name} : type' "
                       "in a Parameters section")
    if not inspect.isclass(obj) and _returns_value(obj):
        secs = sections(doc)
        if "Returns" not in secs and "Yields" not in secs:
            out.append("returns a value but has no Returns section")
    return out


def _public_callables():
    for pkg in PACKAGES:
        module = importlib.import_module(pkg)
        for name in sorted(getattr(module, "__all__", ())):
            obj = getattr(module, name)
            if callable(obj):
                yield pytest.param(pkg, name, id=f"{pkg}.{name}")


@pytest.mark.parametrize(("package", "name"), list(_public_callables()))
def test_public_callable_documents_its_parameters(package, name):
    obj = getattr(importlib.import_module(package), name)
    assert not problems(obj), f"{package}.{name}: " + "; ".join(problems(obj))


# ---- the checker itself ---------------------------------------------------------------------
def _undocumented(a: int, b: float = 1.0) -> float:
    """Add.

    Parameters
    ----------
    a : int
        First.

    Returns
    -------
    float
        The sum.
    """
    return a + b


def _documented(a: int, b: float = 1.0, *args: int, **kwargs: str) -> float:
    """Add.

    Parameters
    ----------
    a, b : number
        Addends.
    *args : int
        Ignored.
    **kwargs : str
        Ignored.

    Returns
    -------
    float
        The sum.
    """
    return a + b


def _no_returns(a: int) -> int:
    """Identity.

    Parameters
    ----------
    a : int
        The value.
    """
    return a


class _Documented:
    """A class.

    Parameters
    ----------
    x : float
        The x.
    """

    def __init__(self, x: float) -> None:
        self.x = x


class _Plain:
    """No constructor of its own: nothing to document."""


class _Error(ValueError):
    """An exception with BaseException's signature."""


def test_checker_catches_what_it_must():
    assert problems(_undocumented) == [
        "parameter 'b' is not documented as 'b : type' in a Parameters section"]
    assert problems(_documented) == []
    assert problems(_no_returns) == ["returns a value but has no Returns section"]
    assert problems(_Documented) == []
    assert problems(_Plain) == [] and problems(_Error) == []
    # a name mentioned only in prose or under another section does not count
    assert documented_parameters("Text mentions b : here.\n\nNotes\n-----\nb : int\n") == set()

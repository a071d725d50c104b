"""The Python packages' modules import each other in one direction only: no circle at module
level, and no cadre module imported inside a function, except where an import must not pull in
torch (``import cadre`` and cadre.ps's servers run without it). Read from the sources, so the
extension need not be built."""
import ast
import os

PYTHON = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = ("cadre", "horovod")
# module -> cadre modules it may import inside functions, and why
DEFERRED = {
    "cadre": {"cadre.serving"},  # save_model needs torch; `import cadre` must not
    "cadre.ps": {"cadre.torch", "cadre.torch.devices", "cadre.torch.cuda_staging"},  # servers: no torch
}


def _modules():
    out = {}
    for package in PACKAGES:
        for folder, _, files in os.walk(os.path.join(PYTHON, package)):
            for f in files:
                if f.endswith(".py"):
                    path = os.path.join(folder, f)
                    name = os.path.relpath(path, PYTHON)[:-3].replace(os.sep, ".")
                    out[name[:-len(".__init__")] if name.endswith(".__init__") else name] = path
    return out


def _imports(modules):
    """module -> (cadre modules imported at module level, {deferred import: line})."""
    out = {}
    for name, path in modules.items():
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        top, deferred = set(), {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                targets = [node.module] + [node.module + "." + a.name for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for t in (t for t in targets if t in modules and t != name):
                if node.col_offset == 0:
                    top.add(t)
                else:
                    deferred[t] = node.lineno
        out[name] = (top, deferred)
    return out


def test_no_import_circles():
    modules = _modules()
    imports = _imports(modules)
    state, stack, circles = {}, [], []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        parents = {m.rsplit(".", i)[0] for i in range(1, m.count(".") + 1)}
        for d in sorted(imports[m][0] - parents):  # a module's own package runs first anyway
            if state.get(d) == "open":
                circles.append(" -> ".join(stack[stack.index(d):] + [d]))
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = "done"

    for m in sorted(modules):
        if m not in state:
            visit(m)
    assert not circles


def test_cadre_modules_are_imported_at_the_top():
    late = ["%s line %d imports %s" % (m, line, t)
            for m, (_, deferred) in sorted(_imports(_modules()).items())
            for t, line in sorted(deferred.items()) if t not in DEFERRED.get(m, ())]
    assert not late

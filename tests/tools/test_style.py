"""The house rules that can be counted (issue 27): no function outside
tests/ over 120 lines, the FUSE operation table's file under 700, the
README about 300 lines with every document it sends readers to there;
and (issue 41) no header declaring what another room's folder defines."""
import os
import re
import subprocess

from conftest import REPO

MAX_FUNCTION = 120


def tracked(*patterns):
    out = subprocess.run(["git", "ls-files", *patterns], cwd=REPO, capture_output=True, text=True)
    if out.returncode:
        import pytest
        pytest.skip("not a git checkout")
    return [f for f in out.stdout.split() if not f.startswith("tests/")]


def functions(path):
    """(name line, length) of each function: the tree's style puts a
    definition's name at column 0, its { and } alone at column 0."""
    with open(os.path.join(REPO, path)) as f:
        lines = f.read().split("\n")
    start = None
    for i, line in enumerate(lines):
        if line == "{" and i > 0:
            start = i - 1
            while start > 0 and lines[start].startswith((" ", "\t")):
                start -= 1
        elif line.startswith("}") and not line.startswith("};") and start is not None:
            yield start + 1, lines[start], i - start + 1
            start = None


def test_no_function_over_120_lines():
    long = ["%s:%d %s (%d lines)" % (path, at, sig.split("(")[0], n)
            for path in tracked("*.c", "*.h")
            for at, sig, n in functions(path) if n > MAX_FUNCTION]
    assert not long, "functions over %d lines: %s" % (MAX_FUNCTION, long)


def tools_python():
    """The tools written in Python: *.py and the scripts whose first line names python."""
    paths = []
    for p in tracked("tools/*"):
        with open(os.path.join(REPO, p), "rb") as f:
            head = f.readline()
        if p.endswith(".py") or (head.startswith(b"#!") and b"python" in head):
            paths.append(p)
    return paths


def test_no_python_function_of_the_tools_over_120_lines():
    import ast
    paths = tools_python()
    assert "tools/bench/rrbench" in paths, paths
    long = []
    for p in paths:
        with open(os.path.join(REPO, p)) as f:
            tree = ast.parse(f.read(), p)
        long += ["%s:%d %s (%d lines)" % (p, n.lineno, n.name, n.end_lineno - n.lineno + 1)
                 for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and n.end_lineno - n.lineno + 1 > MAX_FUNCTION]
    assert not long, "functions over %d lines: %s" % (MAX_FUNCTION, long)


def test_tools_python_names_only_what_is_defined():
    """pyflakes on the Python tools: a name used and never defined (a
    merge's leftover) fails only when its line runs, maybe hours into a
    benchmark; an unused import is a leftover too."""
    r = subprocess.run(["/usr/bin/python3", "-m", "pyflakes"] + tools_python(), cwd=REPO,
                       capture_output=True, text=True)
    assert "No module named pyflakes" not in r.stderr, "python3-pyflakes is a test dependency"
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_counter_sees_functions():
    # The counter above would pass on a tree it cannot read: it must see a
    # known short function whole, and a long one in mount.c.
    found = {sig.split("(")[0].split()[-1]: n for _, sig, n in functions("src/core/lock.c")}
    assert found.get("rr_fs_end_op") == 10, found
    assert any(n > 60 for _, _, n in functions("src/core/mount.c"))


def test_ops_under_700_lines():
    with open(os.path.join(REPO, "src", "fuse", "ops.c")) as f:
        assert sum(1 for _ in f) < 700


def test_readme_short_and_its_documents_there():
    with open(os.path.join(REPO, "README.md")) as f:
        text = f.read()
    assert text.count("\n") <= 300
    links = [l.split("#")[0] for l in re.findall(r"\]\(([^)]+)\)", text) if "://" not in l]
    assert links, "the README sends readers to no document"
    missing = [l for l in links if l and not os.path.exists(os.path.join(REPO, l))]
    assert not missing, "README links to nothing: %s" % missing


def test_every_function_outside_the_plugin_api_has_a_caller():
    """A function other files may call (not static) is called somewhere:
    its name appears in the C sources (tests included) more often than its
    definition and its header's declaration.  The policy API
    (include/rrfuse/policy.h) is for plug-ins, which the tree does not hold."""
    sources = {p: open(os.path.join(REPO, p)).read()
               for p in subprocess.run(["git", "ls-files", "*.c", "*.h"], cwd=REPO, capture_output=True,
                                       text=True).stdout.split()}
    import collections
    words = collections.Counter(w for t in sources.values() for w in re.findall(r"\w+", t))
    api = set(re.findall(r"\b(rrp_\w+)\(", sources.get("include/rrfuse/policy.h", "")))
    assert api, "the policy API's names were not found"
    uncalled = []
    for path, text in sources.items():
        if not path.endswith(".c") or path.startswith("tests/"):
            continue
        for _, sig, _ in functions(path):
            if sig.startswith("static") or "(" not in sig:
                continue
            name = re.findall(r"(\w+)\(", sig)[0]
            if name == "main" or name in api:
                continue
            if words[name] <= 2:
                uncalled.append("%s (%s)" % (name, path))
    assert not uncalled, "non-static functions nobody calls: %s" % uncalled


def test_readme_and_design_name_only_paths_that_exist():
    """Every path of the tree the README and doc/design.md name is there
    (a placeholder in capitals, allocators/NAME.c, stands for any)."""
    missing = []
    for doc in ("README.md", os.path.join("doc", "design.md")):
        with open(os.path.join(REPO, doc)) as f:
            text = f.read()
        paths = set(re.findall(r"\b((?:src|tools|doc|tests|allocators|include|examples)/[\w./-]*\w)", text))
        assert paths, doc
        missing += ["%s: %s" % (doc, p) for p in sorted(paths)
                    if not re.search(r"/[A-Z]+\.", p) and not os.path.exists(os.path.join(REPO, p))]
    assert not missing, "named but not in the tree: %s" % missing


# The one exemption: include/rrfuse/ holds the public interfaces (the
# allocator's API the core calls, alloc.h; the policy API plug-ins build
# against, policy.h) and no .c file of its own, by design: what they declare
# is defined by the allocator engine, allocators/, and by no other folder.
PUBLIC_HEADERS_DEFINED_IN = {"include/rrfuse": {"allocators"}}


def _strip_c(text):
    """A header's top level: comments, preprocessor lines (continued ones
    too) and the insides of braces gone, so that what stays of a name
    followed by ( is a declaration, not a call in a macro or an inline
    function's body."""
    text = re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.S)
    text = re.sub(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", " ", text, flags=re.M)
    # C++'s extern "C" { wraps a whole header's declarations: not a body (its } is let pass below).
    text = re.sub(r'\bextern\s*"C"\s*\{', " ", text)
    out, depth = [], 0
    for ch in text:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth = max(depth - 1, 0)
        elif not depth:
            out.append(ch)
    return "".join(out)


def test_no_header_declares_what_another_room_defines():
    """The rooms' walls (meson.build) stop an #include, not a declaration:
    a header in one folder declaring a function (or extern object) that a
    .c file of another folder defines lets a room call past its wall.  So
    each non-static function and extern object a header declares is
    defined in that header's own folder (include/rrfuse/ aside, above)."""
    files = tracked("*.c", "*.h")
    defined = {}
    for path in files:
        if not path.endswith(".c"):
            continue
        folder = os.path.dirname(path)
        for _, sig, _ in functions(path):
            sig = re.sub(r"^__attribute__\(\(.*?\)\)\s*", "", sig)
            if sig.startswith("static") or "(" not in sig:
                continue
            defined.setdefault(re.findall(r"(\w+)\(", sig)[0], set()).add(folder)
        with open(os.path.join(REPO, path)) as f:
            for m in re.finditer(r"^(?!static|extern|typedef)[A-Za-z_][\w \t*]*?\b(\w+)(?:\[[^]\n]*\])?\s*=",
                                 f.read(), flags=re.M):
                defined.setdefault(m.group(1), set()).add(folder)
    assert len(defined) > 200, "the definitions were not found"
    declared = {}
    for path in files:
        if path.endswith(".h"):
            with open(os.path.join(REPO, path)) as f:
                top = _strip_c(f.read())
            declared[path] = set(re.findall(r"(?<![\w(*])(\w+)\s*\(", top)) | set(
                re.findall(r"\bextern\b[^;(]*?\b(\w+)\s*(?:\[[^]]*\])?\s*;", top))
    # The reader must see known declarations (one inside extern "C"), or it would pass on anything.
    assert {"data_read", "data_hooks"} <= declared.get("src/data/data.h", set()), "data.h not read"
    assert "rrp_groups" in declared.get("include/rrfuse/policy.h", set()), "policy.h not read"
    crossing = []
    for path, names in declared.items():
        folder = os.path.dirname(path)
        allowed = PUBLIC_HEADERS_DEFINED_IN.get(folder, {folder})
        for name in sorted(names):
            if name in defined and not defined[name] & allowed:
                crossing.append("%s: %s (%s)" % (path, name, ", ".join(sorted(defined[name]))))
    assert not crossing, "declared in one room, defined in another: %s" % crossing

#!/usr/bin/env python3
"""The methods each public type's page of the generated documentation shows.

`python3 scripts/doc-pages.py check` (after `cargo doc`) compares them with the list in
scripts/doc-pages.txt, one line a type: `Type: method method ...`; it fails on a method
missing from a page (a call a user would not find) and on one the list does not have (on a
type alias, a call of another type's that the page shows although it cannot be made).
`python3 scripts/doc-pages.py list` prints what the pages show, in the list's form.

A type alias's page (`type.Lock.html`) shows the `impl` blocks written for the alias's own
type on the page, and loads those of the generic type it names from `type.impl/`: both
count. Only inherent methods count, not those of trait implementations.
"""
import json
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(__file__), "..")
DOC = os.path.join(ROOT, "target", "doc")
LIST = os.path.join(ROOT, "scripts", "doc-pages.txt")
CRATE = "redlease"


def page_of(name):
    """The page of the public type `name` at the crate's root, and whether it is an alias."""
    for kind in ("struct", "enum", "type"):
        path = os.path.join(DOC, CRATE, f"{kind}.{name}.html")
        if os.path.exists(path):
            return path, kind == "type"
    sys.exit(f"no page for {name} in {DOC}/{CRATE}: run cargo doc first")


def inherent_methods(html):
    """The methods of the inherent `impl` blocks in a page's HTML (or an impl's fragment)."""
    listed = html.split('id="trait-implementations"')[0]
    listed = listed.split('id="synthetic-implementations"')[0]
    return set(re.findall(r'id="method\.([A-Za-z0-9_]+)"', listed))


def alias_impls(html):
    """The inherent methods the `type.impl` script of an alias's page adds to it: those of
    the entries that name the alias (its `data-self-path`)."""
    found = re.search(r'src="[./]*type\.impl/([^"]+)\.js" data-self-path="([^"]+)"', html)
    if found is None:
        return set()
    script, self_path = found.groups()
    text = open(os.path.join(DOC, "type.impl", script + ".js"), encoding="utf-8").read()
    start = text.index("Object.fromEntries(") + len("Object.fromEntries(")
    end = text.rindex(");\n    if (window")
    methods = set()
    # One list a crate; a documentation built over an older one names a crate again, and
    # which one is current cannot be told.
    entries = json.loads(text[start:end])
    crates = [crate for crate, _ in entries]
    if crates.count(CRATE) > 1:
        sys.exit(f"{script}.js names {CRATE} {crates.count(CRATE)} times, from earlier "
                 f"builds: remove {DOC} and run cargo doc again")
    by_crate = dict(entries)
    for entry in by_crate.get(CRATE, []):
        fragment, trait, aliases = entry[0], entry[1], entry[2:]
        if trait == 0 and self_path in aliases:
            methods |= inherent_methods(fragment)
    return methods


def shown(name):
    path, is_alias = page_of(name)
    html = open(path, encoding="utf-8").read()
    methods = inherent_methods(html)
    if is_alias:
        methods |= alias_impls(html)
    return methods


def wanted():
    types = {}
    for line in open(LIST, encoding="utf-8"):
        line = line.split("#")[0].strip()
        if line:
            name, methods = line.split(":", 1)
            types[name.strip()] = set(methods.split())
    return types


def main():
    command = sys.argv[1] if len(sys.argv) > 1 else "check"
    if command == "list":
        for name in wanted():
            print(f"{name}: {' '.join(sorted(shown(name)))}")
        return
    failed = False
    for name, methods in wanted().items():
        on_page = shown(name)
        for missing in sorted(methods - on_page):
            print(f"{name}: its page does not show `{missing}`")
            failed = True
        for extra in sorted(on_page - methods):
            print(f"{name}: its page shows `{extra}`, which the list does not have")
            failed = True
    if failed:
        sys.exit(1)
    print(f"{len(wanted())} pages show the methods listed in scripts/doc-pages.txt")


if __name__ == "__main__":
    main()

"""Reading what users hand us: files that must exist and be files (not folders, not Git LFS
pointers, with UTF-8 names), UTF-8 text, YAML with unique keys and finite aliases, ``--set``
values, and pydantic errors put as sentences. Problems raise the caller's
:class:`~sim.errors.InputError` subclass naming the file and the field."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import yaml

from sim.errors import InputError

LFS_POINTER = b"version https://git-lfs.github.com/spec/"


def check_file(path: str | Path, field: str | None, error: type[InputError] = InputError,
               what: str = "file") -> Path:
    """``path`` as a Path if it is a readable regular file with real content."""
    path = Path(path).expanduser()
    utf8_name(path, field, error)
    if path.is_dir():
        raise error(str(path), field, f"is a folder; expected a {what}")
    if not path.exists():
        raise error(str(path), field, f"{what} not found")
    if not path.is_file():
        raise error(str(path), field, f"is not a regular file; expected a {what}")
    try:
        with path.open("rb") as f:
            head = f.read(len(LFS_POINTER))
    except OSError as e:
        raise error(str(path), field, f"cannot read the {what}: {e.strerror or e}") from None
    if head == LFS_POINTER:
        raise error(str(path), field, f"is a Git LFS pointer, not the {what} itself; fetch the "
                    "content with `git lfs pull` (or download the file)")
    return path


def utf8_name(path: Path, field: str | None, error: type[InputError] = InputError) -> None:
    """File names reach us undecoded where they are not UTF-8; the libraries that read and
    write our files (pyarrow, pandas) refuse them."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        raise error(str(path).encode("utf-8", "replace").decode(), field,
                    "the name is not UTF-8 text; rename it") from None


def read_text(path: str | Path, field: str | None, error: type[InputError] = InputError,
              what: str = "file") -> str:
    """The UTF-8 text of a checked file; a bad byte is reported with its line and column."""
    path = check_file(path, field, error, what)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise error(str(path), field, f"cannot read the {what}: {e.strerror or e}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise error(str(path), field, f"not UTF-8 text: byte 0x{data[e.start]:02x} at line {line}, "
                    f"column {column}; save the file as UTF-8") from None


def sha256(path: str | Path) -> str:
    """The hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# -- YAML ------------------------------------------------------------------------------------
class UniqueKeyLoader(yaml.SafeLoader):
    """A SafeLoader that refuses a key given twice in one mapping, and reads ``1e3`` and
    ``2e-3`` as numbers (YAML 1.2; PyYAML's YAML 1.1 rules read them as strings)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, yaml.Node] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    hash(key)
                except TypeError:
                    raise yaml.constructor.ConstructorError(
                        "while reading a mapping", node.start_mark,
                        f"a key must be a plain value, not {type(key).__name__}",
                        key_node.start_mark) from None
                if key in seen:
                    first = seen[key].start_mark
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r} (first given at line {first.line + 1}, "
                        f"column {first.column + 1})", key_node.start_mark)
                seen[key] = key_node
        return super().construct_mapping(node, deep)


UniqueKeyLoader.yaml_implicit_resolvers = {
    ch: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:float"]
    for ch, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
UniqueKeyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                |\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
                |[-+]?\.(?:inf|Inf|INF)
                |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."))


def parse_yaml(text: str, source: str, error: type[InputError] = InputError,
               field: str | None = None) -> Any:
    """Parse YAML text; a syntax error or a repeated key names its line and column."""
    try:
        data = yaml.load(text, Loader=UniqueKeyLoader)  # a SafeLoader
    except yaml.reader.ReaderError as e:  # a control character: say where it is
        line = text.count("\n", 0, e.position) + 1
        column = e.position - (text.rfind("\n", 0, e.position) + 1) + 1
        raise error(source, field, f"not valid YAML (line {line}, column {column}): character "
                    f"#x{e.character:04x} is not allowed") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
        raise error(source, field, f"not valid YAML ({where}): {getattr(e, 'problem', e)}") \
            from None
    except RecursionError:
        raise error(source, field, "not valid YAML: its lists and mappings nest too deeply") from None
    try:
        _check_aliases(data, source, error, field)
    except RecursionError:
        raise error(source, field, "not valid YAML: its lists and mappings nest too deeply") from None
    return data


MAX_VALUES = 1_000_000  # values in a document once its aliases are expanded


def _check_aliases(data: Any, source: str, error: type[InputError], field: str | None) -> None:
    """YAML aliases may repeat a block; they may not make it contain itself, or expand to
    millions of values (every later step copies and hashes the expanded document)."""
    sizes: dict[int, int] = {}

    def size(node: Any, path: tuple[int, ...]) -> int:
        if not isinstance(node, (dict, list)):
            return 1
        if id(node) in path:
            raise error(source, field, "a YAML alias (*name) refers to a block that contains it; "
                        "the document would be infinite")
        if id(node) not in sizes:
            children = node.values() if isinstance(node, dict) else node
            sizes[id(node)] = 1 + sum(size(c, (*path, id(node))) for c in children)
            if sizes[id(node)] > MAX_VALUES:
                raise error(source, field, f"the document expands to more than {MAX_VALUES:,} values "
                            "through its YAML aliases")
        return sizes[id(node)]

    size(data, ())


def load_yaml_mapping(path: str | Path, error: type[InputError] = InputError,
                      what: str = "file", field: str | None = None) -> dict:
    """A YAML file holding a mapping; an empty (or comments-only) file is an error."""
    text = read_text(path, field, error, what)
    data = parse_yaml(text, str(path), error, field)
    if data is None:
        raise error(str(path), field, f"the {what} is empty (or only comments); expected a "
                    "mapping of fields")
    if not isinstance(data, dict):
        raise error(str(path), field, f"expected a mapping of fields, got {type(data).__name__}")
    return data


def parse_value(raw: str, source: str = "--set", error: type[InputError] = InputError,
                field: str | None = None) -> Any:
    """A ``--set`` value: YAML (``8``, ``true``, ``[1, 2]``, ``{a: 1}``), else the text itself;
    a mapping that repeats a key is an error."""
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError as e:  # bytes the terminal could not decode reach us as surrogates
        raise error(source, field, f"not UTF-8 text: byte 0x{ord(raw[e.start]) & 0xFF:02x} at "
                    f"character {e.start + 1} of the value; use UTF-8") from None
    if not raw:
        return ""
    try:
        return yaml.load(raw, Loader=UniqueKeyLoader)  # a SafeLoader
    except yaml.constructor.ConstructorError as e:
        raise error(source, field, f"not a valid value: {e.problem}") from None
    except yaml.YAMLError:
        return raw


# -- validation messages ---------------------------------------------------------------------
def _yaml_text(v: Any, limit: int = 80) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    text = repr(v)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def validation_message(err: dict) -> str:
    """One pydantic error as a person would say it, with the offending value."""
    kind, got = err["type"], err.get("input")
    msg = err["msg"].removeprefix("Value error, ")
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "missing":
        return "missing; this field is required"
    if isinstance(got, bool) and kind in ("int_type", "float_type"):
        return f"expected a {'whole ' if kind == 'int_type' else ''}number, got {_yaml_text(got)}"
    if kind == "int_from_float" or (kind == "int_type" and isinstance(got, float)):
        return f"expected a whole number, got {_yaml_text(got)}"
    if kind == "finite_number":
        return f"expected a finite number, got {_yaml_text(got)}"
    if kind == "string_type" and not isinstance(got, (dict, list)):
        return f"expected text, got {_yaml_text(got)} (quote it in YAML to keep it as text)"
    if isinstance(got, (dict, list)) and kind in ("value_error", "assertion_error"):
        return msg  # a check over several fields: the message says what
    return f"{msg} (got {_yaml_text(got)})" if "input" in err else msg

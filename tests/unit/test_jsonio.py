"""The strict JSON reader (pipeline/util/jsonio.py) and the shapes its callers expect.

Python's `json` reads `{"status": "failed", "status": "passed"}` as passed,
`NaN` and `1e999` as floats and nests until the interpreter's recursion limit;
the pipeline's one reader refuses each as an InputError naming the source.
"""

from __future__ import annotations

import json

import pytest
from hostile_http import Route, hostile_server

from pipeline.errors import InputError
from pipeline.harness import client as qualify_harness
from pipeline.register import REGISTER_FILE, REGISTER_TYPE, Register
from pipeline.util import jsonio
from pipeline.util.jsonio import MAX_DEPTH, loads_document, loads_object, read_json, read_json_object


@pytest.mark.parametrize(
    ("data", "what"),
    [
        (b'{"status": "failed", "status": "passed"}', "holds the key 'status' twice in one object"),
        (b'{"a": {"b": 1, "b": 1}}', "holds the key 'b' twice in one object"),
        (b'{"threshold": NaN}', "holds the non-finite number NaN"),
        (b'[Infinity]', "holds the non-finite number Infinity"),
        (b'[-Infinity]', "holds the non-finite number -Infinity"),
        (b'{"ttft_ms": 1e999}', "holds the number 1e999, which overflows to infinity"),
        (b"[" + b"9" * 5000 + b"]", "holds a number out of range"),
        (b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), f"nests arrays or objects deeper than {MAX_DEPTH} levels"),
        (b"[" * 100_000 + b"]" * 100_000, f"nests arrays or objects deeper than {MAX_DEPTH} levels"),
        (b'{"a": 1,}', "is not valid JSON: Expecting property name enclosed in double quotes at line 1 column 9"),
        (b'"\xff"', "is not valid UTF-8 (invalid start byte at byte 1)"),
        (b"", "is not valid JSON: Expecting value at line 1 column 1"),
    ],
)
def test_hostile_documents_are_refused_naming_the_source(data, what):
    with pytest.raises(InputError) as caught:
        loads_document(data, source="evidence/receipt.json")
    assert what in caught.value.what
    assert caught.value.file == "evidence/receipt.json"
    assert "Traceback" not in caught.value.render()


def test_python_json_alone_would_accept_them():
    # The reason for the strict reader: these all parse with the standard library.
    assert json.loads('{"status": "failed", "status": "passed"}') == {"status": "passed"}
    assert json.loads("[NaN, 1e999]")[1] == float("inf")


def test_the_depth_bound_is_exact():
    assert loads_document(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH, source="x") is not None
    assert loads_document(b'{"a":' * MAX_DEPTH + b"1" + b"}" * MAX_DEPTH, source="x") is not None
    with pytest.raises(InputError, match="deeper than"):
        loads_document(b'{"a":' * (MAX_DEPTH + 1) + b"1" + b"}" * (MAX_DEPTH + 1), source="x")


def test_ordinary_documents_are_read_as_before():
    document = loads_document(b'{"b": [1, 2.5, -3e2, true, null, "\\u00e9"], "a": {}}', source="x")
    assert document == {"a": {}, "b": [1, 2.5, -300.0, True, None, "é"]}
    assert loads_document(jsonio.canonical_bytes(document), source="x") == document


def test_the_size_bound_is_checked_before_parsing(tmp_path):
    with pytest.raises(InputError) as caught:
        loads_document(b"[" + b"0," * 600 + b"0]", source="big.json", max_bytes=1024)
    assert "larger than the 1024 bytes allowed" in caught.value.what and caught.value.found == "1203 bytes"
    path = tmp_path / "big.json"
    path.write_bytes(b'{"a": "' + b"x" * 4096 + b'"}')
    with pytest.raises(InputError) as caught:
        read_json(path, max_bytes=1024)
    assert caught.value.file == str(path) and "larger than the 1024 bytes" in caught.value.what


@pytest.mark.parametrize(
    ("data", "found"),
    [(b"[]", "array"), (b'"text"', "string"), (b"3", "number"), (b"null", "null"), (b"true", "boolean")],
)
def test_a_wrong_shape_is_an_input_error(tmp_path, data, found):
    with pytest.raises(InputError) as caught:
        loads_object(data, source="answer")
    assert caught.value.what == "must hold a JSON object" and caught.value.found == found and caught.value.expected == "object"
    path = tmp_path / "doc.json"
    path.write_bytes(data + b"\n")
    with pytest.raises(InputError) as caught:
        read_json_object(path)
    assert caught.value.file == str(path) and caught.value.found == found


def test_read_json_refuses_duplicates_in_files(tmp_path):
    path = tmp_path / "lane-receipt.json"
    path.write_bytes(b'{\n  "status": "failed",\n  "status": "passed"\n}\n')
    with pytest.raises(InputError) as caught:
        read_json_object(path)
    assert caught.value.file == str(path) and "'status' twice" in caught.value.what


# -- shapes of the register --------------------------------------------------------------------


def _register(tmp_path, **changes) -> None:
    document = {"artifact_type": REGISTER_TYPE, "schema_version": 1, "artifacts": [], "stages": {}, **changes}
    (tmp_path / REGISTER_FILE).write_bytes(jsonio.canonical_bytes(document))


@pytest.mark.parametrize(
    ("changes", "field", "what"),
    [
        ({"stages": ["build"]}, "stages", "must hold a JSON object"),
        ({"stages": {"build": ["x"]}}, "stages.build", "must hold a JSON object"),
        ({"stages": {"build": {"outputs": "x"}}}, "stages.build.outputs", "must hold a JSON array"),
        ({"stages": {"build": {"outputs": [1]}}}, "stages.build.outputs", "names outputs that are not strings"),
        ({"artifacts": {"a": 1}}, "artifacts", "must hold a JSON array"),
        ({"artifacts": ["a"]}, "artifacts[0]", "must hold a JSON object"),
    ],
)
def test_a_register_of_the_wrong_shape_is_an_input_error(tmp_path, changes, field, what):
    _register(tmp_path, **changes)
    with pytest.raises(InputError) as caught:
        Register(tmp_path)
    assert caught.value.field == field and caught.value.what == what


def test_an_empty_register_of_the_right_shape_loads(tmp_path):
    _register(tmp_path)
    assert Register(tmp_path).stages == {}


# -- the qualification harness reads the runtime's answers strictly -------------------------------------


@pytest.mark.parametrize(
    ("body", "what"),
    [(b'{"status": "ok", "status": "ok"}', "'status' twice"), (b"[1]", "not an object"), (b'{"x": NaN}', "non-finite")],
)
def test_the_harness_refuses_malformed_answers(body, what):
    with hostile_server() as server:
        server.add("/v1/ninfer/status", Route("body", body=body))
        client = qualify_harness.Client(server.base, "k" * 32, timeout=5)
        with pytest.raises(qualify_harness.GateFailure) as caught:
            client.status()
    assert what in str(caught.value)


def test_the_harness_caps_an_answer():
    with hostile_server() as server:
        server.add("/v1/ninfer/status", Route("endless"))
        client = qualify_harness.Client(server.base, "k" * 32, timeout=5)
        with pytest.raises(qualify_harness.GateFailure) as caught:
            client.status()
        sent = server.sent.get("/v1/ninfer/status", 0)
    assert f"larger than the {qualify_harness.MAX_ANSWER_BYTES} bytes" in str(caught.value) and sent < 64 * 1024 * 1024


def test_toml_is_read_strictly_and_bounded(tmp_path):
    # One TOML reader (lane files, image definitions, release.toml): every defect is an InputError naming the file.
    path = tmp_path / "x.toml"
    for data, what in [
        (b"a = \"\xd7\"\n", "is not valid UTF-8 (invalid continuation byte at byte 5)"),
        (b"a = " + b"[" * 5000, "nests arrays or inline tables too deeply"),
        (b"a = 1\r\n", "contains a carriage return (CR) at line 1"),
        (b"a = \n", "is not valid TOML: Invalid value (at line 1, column 5)"),
    ]:
        path.write_bytes(data)
        with pytest.raises(InputError) as caught:
            jsonio.read_toml(path)
        assert caught.value.what == what and caught.value.file == str(path)
    path.write_bytes(b"a = 1\n" + b"#" * jsonio.MAX_TOML_BYTES)
    with pytest.raises(InputError, match="larger than the 4194304 bytes allowed for a TOML file"):
        jsonio.read_toml(path)
    assert jsonio.loads_toml(b"a = [1, {b = 2}]\n", source="x") == {"a": [1, {"b": 2}]}


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (b'{"lane": "\\ud800"}', "lane"),
        (b'{"gates": {"\\udfff": 1}}', "gates.'\\udfff'"),
        (b'[["ok", "\\uDC00x"]]', "[0][1]"),
    ],
)
def test_an_unpaired_surrogate_escape_is_refused_by_both_readers(data, field):
    # Found with the JSON harness's write-back check (canonical bytes of what was read): "\ud800" parses into a string that
    # canonical_bytes (and print) cannot encode as UTF-8, so a receipt or manifest holding one was
    # read, then crashed compose or audit with a UnicodeEncodeError.
    with pytest.raises(InputError, match="unpaired UTF-16 surrogate") as caught:
        loads_document(data, source="receipt.json")
    assert caught.value.field == field and caught.value.file == "receipt.json"
    with pytest.raises(InputError, match="unpaired UTF-16 surrogate"):
        jsonio.parse_strict(data, file="test-run-receipt.json")
    # A high-low pair is one character, and an escaped backslash is no escape at all.
    assert loads_document(b'["\\ud83d\\ude00", "\\\\ud800"]', source="x") == ["\U0001f600", "\\ud800"]


@pytest.mark.parametrize(
    ("data", "what"),
    [
        (b'{"passed": 1e999}', "holds the number 1e999, which overflows to infinity"),
        (b'{"passed": ' + b"9" * 5000 + b"}", "holds a number out of range"),
    ],
)
def test_the_test_receipt_reader_refuses_what_the_strict_reader_refuses(data, what):
    # parse_strict read 1e999 as infinity, and a 5000-digit integer raised a bare ValueError.
    with pytest.raises(InputError) as caught:
        jsonio.parse_strict(data, file="test-run-receipt.json")
    assert caught.value.what.startswith(what) and caught.value.file == "test-run-receipt.json"

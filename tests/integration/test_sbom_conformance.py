"""Every SPDX document the pipeline writes meets the NTIA minimum elements (ntia-conformance-checker),
every CycloneDX document validates with a second implementation (@cyclonedx/cyclonedx-library),
and the SPDX and CycloneDX documents of one set agree component by component."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import imagekit
import pytest
import sbomkit
from repokit import ROOT
from test_sbom import _small_input
from winfixtures import packaged_native_set

from pipeline.errors import InputError, IntegrityError
from pipeline.formats import sbom
from pipeline.formats.components import ComponentModel, conjunction, copyright_lines
from pipeline.formats.lanes import find_lane
from pipeline.register import Register
from pipeline.stages.image import build_image


def _set_files(assets: Path) -> tuple[Path, Path]:
    return next(assets.glob("*.spdx.json")), next(assets.glob("*.cdx.json"))


# -- the model's own rules ---------------------------------------------------------

def test_licence_conjunction_and_copyright_lines_come_from_the_data():
    assert conjunction(["MIT", "Apache-2.0", "MIT", "LGPL-2.1-or-later OR MIT"]) == "Apache-2.0 AND (LGPL-2.1-or-later OR MIT) AND MIT"
    assert conjunction([]) is None
    text = "MIT License\n\nCopyright (c) 2026 A\n  copyright 2025 B  \nPermission...\nCopyright (c) 2026 A\n"
    assert copyright_lines(text) == "Copyright (c) 2026 A\ncopyright 2025 B"
    assert copyright_lines("no notice here\n") is None


def test_host_dependencies_join_the_model_with_one_call_and_both_documents(tmp_path):
    payload = tmp_path / "payload"
    inp = _small_input(payload)
    inp.host_dependencies = [
        {"name": "libavformat", "version": "61.7.100", "purl": "pkg:deb/debian/libavformat-dev@7:7.1.1-1", "supplier": "Debian", "license": "LGPL-2.1-or-later"},
        {"name": "pkg-config", "version": "1.8.1", "purl": None, "supplier": "freedesktop.org", "license": ""},
    ]
    model = sbom.component_model(inp)
    host = model.of_role("host-build-dependency")
    assert sorted(c.name for c in host) == ["libavformat", "pkg-config"]
    assert {e.target for e in model.edges_from(model.root.ref, "build-dependency")} == {c.ref for c in host}
    spdx_path, cdx_path = tmp_path / "x.spdx.json", tmp_path / "x.cdx.json"
    sbom.write_spdx(spdx_path, inp, payload, model)
    sbom.write_cdx(cdx_path, inp, payload, model)
    sbomkit.require_ntia(spdx_path)
    assert sbomkit.compare_twins(spdx_path, cdx_path) == 6
    document = json.loads(spdx_path.read_text())
    kinds = {(r["relationshipType"]) for r in document["relationships"] if "HostDependency" in r["spdxElementId"] + r["relatedSpdxElement"]}
    assert kinds == {"HAS_PREREQUISITE", "BUILD_DEPENDENCY_OF"}
    cdx = {c["name"]: c for c in json.loads(cdx_path.read_text())["components"]}
    assert cdx["libavformat"]["scope"] == "excluded" and cdx["libavformat"]["purl"] == "pkg:deb/debian/libavformat-dev@7:7.1.1-1"
    with pytest.raises(InputError, match="lacks a field"):
        sbom.component_model(_with(inp, host_dependencies=[{"name": "x", "version": "", "supplier": "y"}]))


def test_a_build_identitys_host_dependencies_give_both_documents_the_same_supplier_and_purl(tmp_path):
    """From the identity's records (as the build's preflight writes them): Debian-owned, a vcpkg port (Windows), and a local build."""
    from packageurl import PackageURL

    from pipeline.formats.components import host_dependency_entries

    def record(name, kind, version, origin, **fields):
        base = {"name": name, "kind": kind, "version": version, "min_version": None, "origin": origin, "debian_package": None, "debian_version": None,
                "vcpkg": None, "file": f"{name}.pc", "file_sha256": "1" * 64, "libraries": [], "release": None, "license": None, "license_source": None}
        return base | fields

    identity = {
        "host_environment": {"os_release": {"ID": "debian", "VERSION_ID": "12"}},
        "host_dependencies": [
            # '+' in a Debian name and version: the purl spec percent-encodes it, in both documents alike.
            record("c++", "tool", "12.2.0", "debian", file="/usr/bin/c++", debian_package="g++-12", debian_version="12.2.0-14+deb12u1",
                   license="GPL-3.0-or-later WITH GCC-exception-3.1", license_source="declared"),
            record("libavcodec", "pkg-config", "61.19.101", "vcpkg", vcpkg={"port": "ffmpeg", "version": "7.1.2", "port_version": "5", "triplet": "x64-windows"},
                   release={"project": "FFmpeg", "version": "7.1.2", "source": "libavutil/ffversion.h FFMPEG_VERSION"}, license="LGPL-2.1-or-later", license_source="self-reported: avcodec_license()"),
            record("libavformat", "pkg-config", "61.7.100", "local", libraries=[{"file": "libavformat.so.61.7.100", "soname": "libavformat.so.61", "link_sha256": "2" * 64}],
                   release={"project": "FFmpeg", "version": "7.1.5", "source": "libavutil/ffversion.h FFMPEG_VERSION"}, license="LGPL-2.1-or-later", license_source="self-reported: avformat_license()"),
        ],
    }
    payload = tmp_path / "payload"
    inp = _with(_small_input(payload), host_dependencies=host_dependency_entries(identity))
    spdx_path, cdx_path = tmp_path / "h.spdx.json", tmp_path / "h.cdx.json"
    sbom.write_spdx(spdx_path, inp, payload)
    sbom.write_cdx(cdx_path, inp, payload)
    assert sbomkit.compare_twins(spdx_path, cdx_path) == 7  # supplier, purl and licences alike in both
    sbomkit.require_ntia(spdx_path)
    sbomkit.require_cdx_js(cdx_path)
    packages = {p["name"]: p for p in json.loads(spdx_path.read_text())["packages"]}
    components = {c["name"]: c for c in json.loads(cdx_path.read_text())["components"]}
    assert packages["c++"]["supplier"] == "Organization: Debian (package g++-12)" and components["c++"]["supplier"]["name"] == "Debian (package g++-12)"
    assert packages["c++"]["licenseDeclared"] == "GPL-3.0-or-later WITH GCC-exception-3.1"
    compiler = PackageURL.from_string(components["c++"]["purl"])
    assert (compiler.type, compiler.namespace, compiler.name, compiler.version) == ("deb", "debian", "g++-12", "12.2.0-14+deb12u1")
    port = PackageURL.from_string(components["libavcodec"]["purl"])
    assert (port.type, port.namespace, port.name, port.version, port.qualifiers) == ("generic", "vcpkg", "ffmpeg", "7.1.2", {"port_version": "5", "triplet": "x64-windows"})
    assert packages["libavcodec"]["supplier"] == "Organization: vcpkg (port ffmpeg)"
    # The local FFmpeg: no purl, the build host as supplier, its release and licence, its files by SHA-256.
    assert "purl" not in components["libavformat"] and not packages["libavformat"].get("externalRefs")
    assert components["libavformat"]["supplier"]["name"] == "the build host (a local build: no package owns it)"
    assert packages["libavformat"]["licenseDeclared"] == packages["libavformat"]["licenseConcluded"] == "LGPL-2.1-or-later"
    assert "release FFmpeg 7.1.5" in packages["libavformat"]["comment"] and f"libavformat.so.61.7.100 {'2' * 64}" in packages["libavformat"]["comment"]
    properties = {p["name"]: p["value"] for p in components["libavformat"]["properties"]}
    assert {v for k, v in properties.items() if k.endswith(":origin")} == {"local"} and {v for k, v in properties.items() if k.endswith(":release")} == {"FFmpeg 7.1.5"}


def _with(inp, **changes):
    from dataclasses import replace

    return replace(inp, **changes)


def test_a_component_without_supplier_or_licence_text_stops_the_model(tmp_path):
    inp = _small_input(tmp_path / "payload")
    vendored = dict(inp.vendored[0], supplier="  ")
    with pytest.raises(IntegrityError, match="has no supplier"):
        sbom.component_model(_with(inp, vendored=[vendored]))
    licensed = dict(inp.vendored[0], license="LicenseRef-Secret")
    with pytest.raises(IntegrityError, match="LicenseRef-Secret has no licence text"):
        sbom.component_model(_with(inp, vendored=[licensed]))
    model = sbom.component_model(_with(inp, vendored=[licensed], license_texts={"LicenseRef-Secret": ("Secret", "terms\n")}))
    assert model.license_refs() == ["LicenseRef-Secret"] and isinstance(model, ComponentModel)


# -- the checkers can fail -------------------------------------------------------------

def test_the_ntia_check_fails_a_package_without_supplier(tmp_path):
    payload = tmp_path / "payload"
    inp = _small_input(payload)
    good = tmp_path / "good.spdx.json"
    sbom.write_spdx(good, inp, payload)
    sbomkit.require_ntia(good)
    document = json.loads(good.read_text())
    for package in document["packages"]:
        if package["name"] == "tinycrc":
            package["supplier"] = "NOASSERTION"
    bad = tmp_path / "bad.spdx.json"
    bad.write_text(json.dumps(document))
    report = sbomkit.ntia_report(bad)
    assert report["isConformant"] is False and report["componentSuppliers"]["nonconformantComponents"] == ["tinycrc"]
    with pytest.raises(AssertionError, match="tinycrc"):
        sbomkit.require_ntia(bad)
    # A package linked only by a relationship the checker does not follow is "floating": refused too.
    document = json.loads(good.read_text())
    document["relationships"] = [r for r in document["relationships"] if not (r["relationshipType"] == "CONTAINS" and "Vendored" in r["relatedSpdxElement"])]
    floating = tmp_path / "floating.spdx.json"
    floating.write_text(json.dumps(document))
    with pytest.raises(AssertionError, match="not reached"):
        sbomkit.require_ntia(floating)


def test_the_javascript_validator_rejects_a_broken_cyclonedx_document(tmp_path):
    payload = tmp_path / "payload"
    inp = _small_input(payload)
    good = tmp_path / "good.cdx.json"
    sbom.write_cdx(good, inp, payload)
    document = json.loads(good.read_text())
    document["components"][0]["hashes"] = [{"alg": "SHA-256", "content": "xyz"}]
    bad = tmp_path / "bad.cdx.json"
    bad.write_text(json.dumps(document))
    good_result, bad_result = sbomkit.validate_cdx_js(good, bad)
    assert good_result["valid"] and good_result["errors"] == []
    assert not bad_result["valid"] and any("hashes/0/content" in e for e in bad_result["errors"])


def test_the_twin_comparison_notices_a_version_licence_or_hash_that_differs(tmp_path):
    payload = tmp_path / "payload"
    inp = _small_input(payload)
    spdx_path, cdx_path = tmp_path / "a.spdx.json", tmp_path / "a.cdx.json"
    sbom.write_spdx(spdx_path, inp, payload)
    sbom.write_cdx(cdx_path, inp, payload)
    assert sbomkit.compare_twins(spdx_path, cdx_path) == 4
    original = cdx_path.read_text()
    for old, new, message in (
        ('"version": "1.2.0"', '"version": "1.2.1"', "components differ"),
        ('"id": "MIT"', '"id": "BSD-3-Clause"', "declared"),
        (inp.files[-1].sha256, "0" * 64, "hashes"),
    ):
        assert old in original
        cdx_path.write_text(original.replace(old, new))
        with pytest.raises(AssertionError, match=message):
            sbomkit.compare_twins(spdx_path, cdx_path)


# -- every document the pipeline writes ------------------------------------------------

def test_the_small_set_documents_conform_and_agree(tmp_path):
    payload = tmp_path / "payload"
    inp = _small_input(payload)
    spdx_path, cdx_path = tmp_path / "s.spdx.json", tmp_path / "s.cdx.json"
    sbom.write_spdx(spdx_path, inp, payload)
    sbom.write_cdx(cdx_path, inp, payload)
    sbomkit.require_ntia(spdx_path)
    sbomkit.require_cdx_js(cdx_path)
    sbomkit.compare_twins(spdx_path, cdx_path)
    # The checker's own command line agrees (rc 0 when conformant).
    checked = subprocess.run([sys.executable, "-m", "ntia_conformance_checker.main", "--comply", "ntia", str(spdx_path)], capture_output=True, text=True)
    assert checked.returncode == 0 and "Conformant: True" in checked.stdout, checked.stdout + checked.stderr


@pytest.mark.slow
@pytest.mark.parametrize("short", ["4090", "3090"])
def test_native_sets_made_from_mingw_binaries_conform_and_agree(tmp_path_factory, short):
    workspace, dist = packaged_native_set(tmp_path_factory, short)
    spdx_path, cdx_path = _set_files(dist / workspace.lane.id / "assets")
    report = sbomkit.require_ntia(spdx_path)
    sbomkit.require_cdx_js(cdx_path)
    compared = sbomkit.compare_twins(spdx_path, cdx_path)
    # archive + 3 binaries + 7 bundled DLLs + 3 Windows DLLs + 2 vendored + the CUDA toolkit
    assert compared == report["totalNumberComponents"] == 17
    document = json.loads(spdx_path.read_text())
    packages = {p["name"]: p for p in document["packages"]}
    [root] = [p for p in document["packages"] if p["SPDXID"] == sbom.SPDX_PACKAGE_ID]
    # The archive no longer claims Apache-2.0 for what it bundles: each part states its own terms.
    assert root["licenseDeclared"] == "NOASSERTION"
    assert root["licenseConcluded"] == "Apache-2.0 AND LGPL-2.1-or-later AND LicenseRef-Microsoft-DirectStorage AND LicenseRef-NVIDIA-CUDA-EULA AND MIT AND curl"
    assert packages["avformat-61.dll"]["licenseDeclared"] == "LGPL-2.1-or-later" and packages["avformat-61.dll"]["supplier"] == "Organization: FFmpeg project"
    # Versions from the DLLs' own version resources (the lane types none): FFmpeg 7.1.2 and curl 8.17.0.
    assert (packages["avformat-61.dll"]["versionInfo"], packages["libcurl.dll"]["versionInfo"]) == ("7.1.2", "8.17.0")
    assert packages["cudart64_13.dll"]["licenseConcluded"] == "LicenseRef-NVIDIA-CUDA-EULA" and packages["cudart64_13.dll"]["versionInfo"] == "13.3.73"
    assert packages["dstorage.dll"]["licenseDeclared"] == "LicenseRef-Microsoft-DirectStorage"
    assert packages["ninfer-serve.exe"]["licenseDeclared"] == "Apache-2.0"
    assert packages["ninfer-serve.exe"]["copyrightText"] == "Copyright (c) 2026 OMP NInfer sample authors"
    assert packages["tinycrc"]["copyrightText"] == "Copyright (c) 2026 OMP NInfer sample authors"
    assert packages["KERNEL32.dll"]["supplier"] == "Organization: Microsoft Corporation"
    texts = {e["licenseId"]: e["extractedText"] for e in document["hasExtractedLicensingInfos"]}
    assert sorted(texts) == ["LicenseRef-Microsoft-DirectStorage", "LicenseRef-NVIDIA-CUDA-EULA"]
    # DirectStorage's terms are the LICENSE.txt its package ships, given beside the DLLs, not the repository's stand-in.
    assert texts["LicenseRef-Microsoft-DirectStorage"] == (workspace.prebuilt / "LICENSE.txt").read_text()
    assert texts["LicenseRef-Microsoft-DirectStorage"] != (ROOT / "packaging/licenses/LicenseRef-Microsoft-DirectStorage.txt").read_text()
    # The graph is the import analysis: the binaries' PE imports and dstorage's LoadLibrary companion.
    ids = {p["SPDXID"]: p["name"] for p in document["packages"]}
    relations = {(ids.get(r["spdxElementId"]), r["relationshipType"], ids.get(r["relatedSpdxElement"])) for r in document["relationships"]}
    from pipeline.formats.lanes import load_lane
    from pipeline.lanework.binaries import inspect_binary

    lane = load_lane(workspace.lanes_dir / f"{workspace.lane.id}.toml")
    exe = workspace.prebuilt / "ninfer-serve.exe"
    imported = {name.lower() for name in inspect_binary(exe).needed}
    linked = {target.lower() for source, kind, target in relations if source == "ninfer-serve.exe" and kind == "DYNAMIC_LINK"}
    assert linked == imported and {"avformat-61.dll", "kernel32.dll"} <= linked
    assert ("dstorage.dll", "DEPENDS_ON", "dstoragecore.dll") in relations
    assert ("avformat-61.dll", "DYNAMIC_LINK", "avcodec-61.dll") in relations
    assert lane.redistributables  # the lane the set was made from


def test_the_image_sbom_conforms(tmp_path, local_base, private_oci_cache, registry_lane):
    lane = find_lane("rtx5090-container")  # on a registry base (registry_lane): the shipped lane file names its package base
    dist = tmp_path / "dist"
    imagekit.write_package(dist, lane, binaries=imagekit.stand_in_binaries(tmp_path / "bin"))
    definition = tmp_path / "definition.toml"
    definition.write_text(imagekit.definition_text("docker.io/nvidia/cuda", local_base.index_digest))
    build_image(lane.id, dist=dist, definition=definition, base_layout=local_base.layout)
    entry = Register(dist).one("image-sbom", lane=lane.id, needed_by="t", produced_by="t")
    path = Register(dist).verified_path(entry)
    report = sbomkit.require_ntia(path)
    assert report["totalNumberComponents"] == 3
    document = json.loads(path.read_text())
    relations = {(r["spdxElementId"], r["relationshipType"], r["relatedSpdxElement"]) for r in document["relationships"]}
    assert {("SPDXRef-Image", "CONTAINS", "SPDXRef-BaseImage"), ("SPDXRef-Image", "CONTAINS", "SPDXRef-BinaryArchive")} <= relations
    packages = {p["SPDXID"]: p for p in document["packages"]}
    base = packages["SPDXRef-BaseImage"]
    # The base: its name and digest, the terms the definition states for it, NOASSERTION only for what is not analysed.
    assert base["filesAnalyzed"] is False and base["licenseDeclared"] == "LicenseRef-NVIDIA-CUDA-EULA" and base["licenseConcluded"] == "NOASSERTION"
    assert "not analysed" in base["comment"]
    # The one purl builder's spelling (packageurl's canonical string, as the CycloneDX library writes it).
    assert {r["referenceLocator"] for r in base["externalRefs"]} == {f"pkg:oci/cuda@{local_base.index_digest}?arch=amd64&repository_url=docker.io/nvidia/cuda&tag=13.1-runtime-test"}
    assert packages["SPDXRef-BinaryArchive"]["licenseConcluded"] == "Apache-2.0 AND MIT AND Zlib"
    assert {f["licenseConcluded"] for f in document["files"]} == {"Apache-2.0", "NOASSERTION"}
    assert base["supplier"] == f"Organization: {lane.providers['base-image'].supplier}" == "Organization: NVIDIA Corporation"
    assert packages["SPDXRef-Image"]["supplier"] == packages["SPDXRef-BinaryArchive"]["supplier"] == "Organization: alphastorm"
    assert document["creationInfo"]["creators"][0] == "Tool: " + sbom.tool_creator()


def test_a_lane_without_its_providers_is_refused(tmp_path):
    from pipeline.formats.lanes import DEFAULT_LANES_DIR, load_lane

    text = (DEFAULT_LANES_DIR / "rtx5090-container.toml").read_text()
    start = text.index("[package.base_image_provider]")
    end = text.index("[qualification]")
    path = tmp_path / "rtx5090-container.toml"
    path.write_text(text[:start] + text[end:])
    with pytest.raises(InputError, match="base-image libraries but not who provides them") as caught:
        load_lane(path)
    assert caught.value.field == "package.base_image_provider"
    shutil.rmtree(tmp_path)


def test_without_node_ci_fails_and_a_local_run_skips_with_the_reason(monkeypatch, tmp_path):
    import nodekit

    monkeypatch.setattr(nodekit.shutil, "which", lambda name: None)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI must have it"):
        sbomkit.node_validator()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="apt-get install nodejs npm"):
        sbomkit.node_validator()
    # node present but the pinned package missing: a failure naming the fix, in CI or not.
    monkeypatch.setattr(nodekit.shutil, "which", lambda name: "/usr/bin/node")
    monkeypatch.setattr(nodekit, "NODE_TOOLS", tmp_path)
    with pytest.raises(pytest.fail.Exception, match="npm ci --prefix tools/node"):
        sbomkit.node_validator()


def test_every_purl_of_the_model_is_in_the_one_canonical_spelling_and_a_broken_one_is_refused():
    from pipeline.formats.components import Component, purl

    root = Component(ref="package:x.tar.gz", role="package", name="x", version="1", supplier="s", purl="pkg:github/AlphaStorm/NInfer@v1")
    model = ComponentModel(root=root)
    assert model.root.purl == purl("github", "NInfer", "v1", namespace="AlphaStorm") == "pkg:github/alphastorm/ninfer@v1"
    added = model.add(Component(ref="host:g++", role="host-build-dependency", name="g++", version="12", supplier="Debian", purl="pkg:deb/debian/g++-12@12.2.0-14+deb12u1"))
    assert added.purl == "pkg:deb/debian/g%2B%2B-12@12.2.0-14%2Bdeb12u1"
    with pytest.raises(InputError, match="is not a package URL") as caught:
        model.add(Component(ref="vendored:y", role="vendored-source", name="y", version="1", supplier="s", purl="github/JuliaStrings/utf8proc"))
    assert caught.value.field == "vendored:y"

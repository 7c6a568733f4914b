"""Independent checks of the SBOMs the pipeline writes.

- `require_ntia(path)`: the SPDX document meets the NTIA minimum elements as
  `ntia-conformance-checker` (the SPDX project's checker, PyPI) judges it, with
  every package reached from the described archive (none "floating", which the
  checker would silently leave out) and no relationship to an unknown element.
- `validate_cdx_js(paths)`: the CycloneDX documents validate with OWASP's
  JavaScript implementation (@cyclonedx/cyclonedx-library, pinned in
  tools/node/package-lock.json), a second implementation beside the Python
  library that wrote them.
- `compare_twins(spdx, cdx)`: the SPDX and CycloneDX documents of one set list
  the same components with the same versions, suppliers, purls, licences,
  copyright texts and hashes, and the same runtime dependency graph.

Node policy: tests/kits/nodekit.py (skip without node locally, fail in CI or with another version).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from nodekit import node_command

CDX_LIBRARY = "@cyclonedx/cyclonedx-library"


# -- NTIA ----------------------------------------------------------------------------

def ntia_report(path: Path) -> dict[str, Any]:
    from ntia_conformance_checker.sbom_checker import SbomChecker

    checker = SbomChecker(str(path), validate=True, compliance="ntia", sbom_spec="spdx2")
    return checker.output_json()


def require_ntia(path: Path) -> dict[str, Any]:
    report = ntia_report(path)
    missing = {key: report[key]["nonconformantComponents"] for key in ("componentNames", "componentVersions", "componentIdentifiers", "componentSuppliers")}
    assert report["parsingError"] == [], f"{path.name}: ntia-conformance-checker could not parse it: {report['parsingError']}"
    assert report["validationMessages"] == [], f"{path.name}: SPDX validation messages: {report['validationMessages']}"
    graph = report["graphValidation"]
    assert graph["floatingComponents"]["floatingComponentCount"] == 0, f"{path.name}: packages not reached from the described element: {graph['floatingComponents']['floatingComponentIds']}"
    assert not graph["unknownPointers"]["hasUnknownPointers"], f"{path.name}: relationships to unknown elements: {graph['unknownPointers']['unknownPointerEdges']}"
    assert report["componentsEvaluated"] and report["totalNumberComponents"] >= 1
    assert missing == {key: [] for key in missing}, f"{path.name}: components missing NTIA minimum elements: {missing}"
    for flag in ("authorNameProvided", "timestampProvided", "dependencyRelationshipsProvided"):
        assert report[flag] is True, f"{path.name}: {flag} is false"
    assert report["isConformant"] is True, f"{path.name} is not NTIA-conformant: {json.dumps(report, sort_keys=True)[:2000]}"
    return report


# -- CycloneDX with the JavaScript library ----------------------------------------------

def node_validator() -> list[str]:
    """The command that validates CycloneDX files, or skip/fail per the node policy (tests/kits/nodekit.py)."""
    return node_command("validate-cyclonedx.cjs", CDX_LIBRARY, purpose="the CycloneDX cross-check with @cyclonedx/cyclonedx-library")


def validate_cdx_js(*paths: Path) -> list[dict[str, Any]]:
    """Results per file ({file, specVersion, valid, errors}); the process's status is checked too."""
    result = subprocess.run([*node_validator(), *map(str, paths)], capture_output=True, text=True, timeout=120)
    if result.returncode not in (0, 1):
        raise AssertionError(f"the CycloneDX validator could not run (rc {result.returncode}): {result.stderr.strip()}")
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert [Path(line["file"]) for line in lines] == list(paths)
    assert (result.returncode == 0) == all(line["valid"] for line in lines)
    return lines


def require_cdx_js(*paths: Path) -> None:
    for line in validate_cdx_js(*paths):
        assert line["valid"] and line["specVersion"] == "1.6", f"{line['file']}: @cyclonedx/cyclonedx-library rejects it: {line['errors'][:5]}"


# -- SPDX and CycloneDX of one set agree -------------------------------------------------

def _spdx_table(document: dict[str, Any]) -> tuple[dict, set, str, set]:
    packages = {p["SPDXID"]: p for p in document["packages"]}
    [root_id] = [r["relatedSpdxElement"] for r in document["relationships"] if r["spdxElementId"] == "SPDXRef-DOCUMENT" and r["relationshipType"] == "DESCRIBES"]
    table = {}
    for package in packages.values():
        key = (package["name"], package["versionInfo"])
        assert key not in table, f"two SPDX packages are {key}"
        purls = [r["referenceLocator"] for r in package.get("externalRefs", []) if r["referenceType"] == "purl"]
        table[key] = {
            "supplier": package["supplier"].removeprefix("Organization: "),
            "purl": purls[0] if purls else None,
            "declared": package["licenseDeclared"],
            "concluded": package["licenseConcluded"],
            "copyright": package["copyrightText"],
            "hashes": {c["algorithm"]: c["checksumValue"] for c in package.get("checksums", [])},
        }
    key_of = {spdx_id: (p["name"], p["versionInfo"]) for spdx_id, p in packages.items()}
    edges = {
        (key_of[r["spdxElementId"]], key_of[r["relatedSpdxElement"]])
        for r in document["relationships"]
        if r["relationshipType"] in ("DYNAMIC_LINK", "DEPENDS_ON")
    }
    contained = {key_of[r["relatedSpdxElement"]] for r in document["relationships"] if r["spdxElementId"] == root_id and r["relationshipType"] == "CONTAINS" and r["relatedSpdxElement"] in packages}
    return table, edges, key_of[root_id], contained


def _cdx_licence(component: dict[str, Any]) -> tuple[str, str]:
    """(declared, concluded) as SPDX would say them."""
    licenses = component.get("licenses", [])
    if not licenses:
        return "NOASSERTION", "NOASSERTION"
    assert len(licenses) == 1, component["bom-ref"]
    item = licenses[0]
    expression = item.get("expression") or item["license"].get("id") or item["license"].get("name")
    acknowledgement = item.get("acknowledgement") or item.get("license", {}).get("acknowledgement")
    if acknowledgement == "concluded":
        return "NOASSERTION", expression
    return expression, expression


def _cdx_table(document: dict[str, Any]) -> tuple[dict, set, tuple, set]:
    root = document["metadata"]["component"]
    table, key_of = {}, {}
    for component in [root, *document["components"]]:
        key = (component["name"], component["version"])
        assert key not in table, f"two CycloneDX components are {key}"
        declared, concluded = _cdx_licence(component)
        table[key] = {
            "supplier": component.get("supplier", {}).get("name"),
            "purl": component.get("purl"),
            "declared": declared,
            "concluded": concluded,
            "copyright": component.get("copyright", "NOASSERTION"),
            "hashes": {h["alg"].replace("-", ""): h["content"] for h in component.get("hashes", [])},
        }
        key_of[component["bom-ref"]] = key
    root_key = key_of[root["bom-ref"]]
    edges, from_root = set(), set()
    for dependency in document.get("dependencies", []):
        for target in dependency.get("dependsOn", []):
            if dependency["ref"] == root["bom-ref"]:
                from_root.add(key_of[target])
            else:
                edges.add((key_of[dependency["ref"]], key_of[target]))
    return table, edges, root_key, from_root


def compare_twins(spdx_path: Path, cdx_path: Path) -> int:
    """Assert the two documents of one set agree; the number of components compared."""
    spdx, spdx_edges, spdx_root, contained = _spdx_table(json.loads(spdx_path.read_text()))
    cdx, cdx_edges, cdx_root, from_root = _cdx_table(json.loads(cdx_path.read_text()))
    assert spdx_root == cdx_root, f"the SPDX document describes {spdx_root}, the CycloneDX one {cdx_root}"
    assert sorted(spdx) == sorted(cdx), f"components differ: only in SPDX {sorted(set(spdx) - set(cdx))}, only in CycloneDX {sorted(set(cdx) - set(spdx))}"
    for key in sorted(spdx):
        for field in ("supplier", "purl", "declared", "concluded", "copyright", "hashes"):
            assert spdx[key][field] == cdx[key][field], f"{key} {field}: SPDX {spdx[key][field]!r}, CycloneDX {cdx[key][field]!r}"
    assert spdx_edges == cdx_edges, f"import graphs differ: only in SPDX {sorted(spdx_edges - cdx_edges)}, only in CycloneDX {sorted(cdx_edges - spdx_edges)}"
    assert from_root <= contained, f"CycloneDX root dependencies the SPDX archive does not contain: {sorted(from_root - contained)}"
    return len(spdx)

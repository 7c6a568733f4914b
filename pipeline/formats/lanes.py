"""Lanes: one TOML file per GPU lane under runtime/lanes/, loaded into typed objects.

A lane says what to build (CUDA architecture, toolkit, CMake arguments,
targets), where it can be built (host platform), how its component release is
named (version, tag and asset-name patterns), what its package may bundle and
what its qualification must reach.  The file is the only place these facts
live; stages read them from the Lane object.

The beta number N is not in the lane file: it is data of the lane's cut ledger
(`runtime/cuts/<lane-id>.json` beside `runtime/lanes/`, pipeline/formats/cut_ledger.py),
written only by `python -m pipeline cut`.  `Lane.beta` is the number of the
lane's current cut when the lane was loaded (None for a lane never cut).
"""

from __future__ import annotations

import math
import platform as host_platform_module
import re
import string
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pipeline.errors import InputError, UsageError
from pipeline.formats.ci_checks import check_names
from pipeline.formats.cut_ledger import BETA_EXPECTED, MAX_BETA, MIN_BETA, is_beta, ledger_path, load_ledger
from pipeline.util.hashing import is_commit_hex, is_sha256_hex, sha256_bytes
from pipeline.util.jsonio import read_toml
from pipeline.util.safepath import safe_component, safe_relative
from pipeline.util.schema import Field, matches, one_of, read_table

_PACKAGE = Path(__file__).resolve().parents[1]  # pipeline/
# A checkout has the repository above the package.  An installed wheel (the verifier shipped with a
# release) has no repository: it carries the lane files and the licence texts they name under
# pipeline/data/repo/, in the same layout (setup.py).
REPO_ROOT = _PACKAGE.parent if (_PACKAGE.parent / "runtime" / "lanes").is_dir() else _PACKAGE / "data" / "repo"
DEFAULT_LANES_DIR = REPO_ROOT / "runtime" / "lanes"
# Licence texts a package may bundle beside a redistributable (repository-relative).
LICENSES_DIR = "packaging/licenses"
# Lifecycle scripts a Windows package ships (repository-relative).
SCRIPTS_DIR = "packaging/windows"

CUDA_ARCHITECTURES = {
    # CMAKE_CUDA_ARCHITECTURES value -> compute capability
    "86": "8.6",
    "89": "8.9",
    "90": "9.0",
    "120a": "12.0",
}
PLATFORMS = ("linux-x86_64", "windows-x86_64")
LANE_KINDS = ("container", "windows-native")
BINARY_NAME = r"[a-z][a-z0-9_-]*"
PATTERN_FIELDS = ("version", "n")
# Name patterns render into file names, release ids and tags: bounded, and only these
# characters around the placeholders (the rendered name is checked as a file name too).
MAX_PATTERN = 128
PATTERN_LITERAL = re.compile(r"[A-Za-z0-9._+-]*")
MAX_VERSION = 32


def _number_in(low: float, high: float, *, integer: bool = False):
    """A finite number in (low, high] (an integer when asked); never a bool, NaN or infinity."""

    def check(value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
            return False
        return math.isfinite(value) and low < value <= high

    return check


def _range_text(low: float, high: float, unit: str, *, integer: bool = False) -> str:
    kind = "an integer" if integer else "a finite number"
    return f"{kind} of {unit} above {low:g} and at most {high:g}"


def check_beta(value: Any, *, field: str = "--beta", file: str | Path | None = None) -> int:
    """A beta number from a front door (command line, nox, a function call): an integer 1..MAX_BETA."""
    if not is_beta(value):
        raise UsageError(
            "is not a beta number",
            file=file,
            field=field,
            found=value,
            expected=BETA_EXPECTED,
            why="beta.N numbers every component cut from 1; beta 0 (or below) names no cut and would label bytes with a tag that can never exist",
            fix="pass the beta number of the cut, e.g. --beta 2, or leave --beta out to use the lane file's",
        )
    return value


_TOP = {
    "schema_version": Field(int, check=lambda v: v == 1, expected="1"),
    "id": Field(str, check=matches(r"rtx[0-9]{4}-(container|windows-native)"), expected="'rtx<NNNN>-container' or 'rtx<NNNN>-windows-native'"),
    "short_name": Field(str, check=matches(r"[0-9]{4}"), expected="the four-digit GPU number, e.g. '4090'"),
    "kind": Field(str, check=one_of(*LANE_KINDS), expected=" or ".join(LANE_KINDS)),
    "title": Field(str),
    "gpu": Field(dict),
    "cuda": Field(dict),
    "platform": Field(dict),
    "component": Field(dict),
    "source": Field(dict),
    "build": Field(dict),
    "package": Field(dict),
    "qualification": Field(dict),
}
_GPU = {
    "name": Field(str),
    "compute_capability": Field(str, check=matches(r"[0-9]+\.[0-9]"), expected="'<major>.<minor>', e.g. '8.9'"),
    "minimum_driver_major": Field(int, check=lambda v: 0 < v <= 9999, expected="a driver branch 1..9999, e.g. 580"),
    "vram_mib": Field(int, check=lambda v: 0 < v <= 1 << 20, expected="a number of MiB 1..1048576"),
}
_CUDA = {
    "architecture": Field(str, check=lambda v: v in CUDA_ARCHITECTURES, expected="one of " + ", ".join(repr(a) for a in CUDA_ARCHITECTURES)),
    "toolkit": Field(str, check=matches(r"13\.[0-9]+"), expected="a CUDA 13 toolkit line such as '13.1'"),
}
_PLATFORM = {
    "build_host": Field(str, check=one_of(*PLATFORMS), expected=" or ".join(PLATFORMS)),
    "target": Field(str, check=one_of(*PLATFORMS), expected=" or ".join(PLATFORMS)),
    "asset_platform": Field(str, check=matches(r"(linux|windows)-x86_64-cuda13\.[0-9]+(-rtx[0-9]{4})?"), expected="e.g. 'windows-x86_64-cuda13.3-rtx4090'"),
}
_COMPONENT = {
    "repository": Field(str, check=matches(r"https://github\.com/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+"), expected="an https://github.com/<owner>/<repo> URL"),
    "version": Field(str, check=lambda v: len(v) <= MAX_VERSION and matches(r"[0-9]+\.[0-9]+\.[0-9]+")(v), expected=f"a version 'X.Y.Z' of at most {MAX_VERSION} characters"),
    "tag_pattern": Field(str),
    "stem_pattern": Field(str),
    "release_id_pattern": Field(str),
    "deployment_profile": Field(str),
    "build_profile": Field(str),
}
_SOURCE = {
    "repository": Field(str, check=matches(r"https://\S+"), expected="an https git URL"),
    "commit": Field(str, required=False, check=is_commit_hex, expected="a full 40-hex commit"),
    "upstream_base": Field(str, required=False, check=is_commit_hex, expected="a full 40-hex commit"),
    "note": Field(str, required=False),
    # The runtime repository's CI that must have concluded `success` at a cut's exact commit (formats/ci_checks.py).
    "required_checks": Field(list),
}
_BUILD = {
    "generator": Field(str, check=one_of("Ninja"), expected="'Ninja'"),
    "build_type": Field(str, check=one_of("Release"), expected="'Release'"),
    "cmake_args": Field(list, items=str),
    "targets": Field(list, items=str, check=lambda v: len(v) > 0, expected="a non-empty list of CMake targets"),
    "binaries": Field(list, items=str, check=lambda v: len(v) > 0, expected="a non-empty list of binaries"),
    "optional_binaries": Field(list, items=str, required=False, default=[]),
    # What the build host must provide beyond the pinned toolchain ([[build.host_dependencies]]).
    "host_dependencies": Field(list, items=dict, required=False, default=[]),
}
HOST_DEPENDENCY_KINDS = ("pkg-config", "tool")
# A pkg-config module name (libavformat) or a tool's executable name (pkg-config, c++): never a path, never an option.
HOST_DEPENDENCY_NAME = r"[A-Za-z0-9][A-Za-z0-9+._-]{0,127}"
HOST_COMPILER = "c++"  # the tool nvcc's host compilation runs (a Linux lane declares it: its version decides the bytes)
_VERSION = r"[0-9]+(\.[0-9]+)*"
_LICENSE_EXPRESSION = r"[A-Za-z0-9.+-]+( (AND|OR|WITH) [A-Za-z0-9.+-]+)*"
_HOST_DEPENDENCY = {
    "name": Field(str, check=matches(HOST_DEPENDENCY_NAME), expected="a pkg-config module or executable name, e.g. 'libavformat'"),
    "kind": Field(str, check=one_of(*HOST_DEPENDENCY_KINDS), expected=" or ".join(repr(k) for k in HOST_DEPENDENCY_KINDS)),
    # The floor checked before any compile (pkg-config's own 'module >= version' for modules).
    "min_version": Field(str, required=False, check=matches(_VERSION), expected="a dotted version such as '60' or '7.85'"),
    # Where it comes from, per host kind: the Debian/Ubuntu package and the vcpkg port.
    "debian": Field(str, required=False, check=matches(r"[a-z0-9][a-z0-9+.-]+"), expected="a Debian package name, e.g. 'libavformat-dev'"),
    "vcpkg": Field(str, required=False, check=matches(r"[a-z0-9][a-z0-9-]*(\[[a-z0-9,-]+\])?"), expected="a vcpkg port with optional features, e.g. 'ffmpeg[avformat]'"),
    # The host platforms the entry applies to (default: every platform).
    "hosts": Field(list, items=str, required=False, check=lambda v: bool(v) and all(h in PLATFORMS for h in v), expected="a non-empty list of " + ", ".join(PLATFORMS)),
    # Its licence as the declaration states it (SPDX expression): recorded with source `declared` where the
    # library does not report its own (FFmpeg does: pipeline/lanework/hostlibs.py).
    "license": Field(str, required=False, check=matches(_LICENSE_EXPRESSION), expected="an SPDX licence expression, e.g. 'curl' or 'LGPL-2.1-or-later'"),
}
_PACKAGE = {
    "layout": Field(str, check=one_of("binary-archive", "native-asset-set"), expected="'binary-archive' (container lane) or 'native-asset-set' (Windows lanes)"),
    "license": Field(str, check=matches(_LICENSE_EXPRESSION), expected="the runtime's SPDX licence expression, e.g. 'Apache-2.0'"),
    "system_libraries": Field(list, items=str),
    "driver_libraries": Field(list, items=str),
    "base_image_libraries": Field(list, items=str, required=False, default=[]),
    # A package-base image definition of this lane (containers/**.toml, [base] kind = "packages"): its
    # lock says which package ships each library, so base_image_libraries are derived from it, not typed
    # (formats/image_definition.py: lane_base_libraries).  One of the two, never both.
    "base_image": Field(str, required=False, check=matches(r"containers/[A-Za-z0-9_./-]+\.toml"), expected="a path such as 'containers/trixie/ninfer-runtime.toml'"),
    "redistributables": Field(list, items=dict, required=False, default=[]),
    "server_config": Field(str, required=False),
    "release_spec": Field(str, required=False),
    "support_scripts": Field(list, items=str, required=False, default=[]),
    # Who provides the system and base-image libraries the package does not bundle, and the
    # version it relies on: the supplier and version of those components in the SBOMs.
    "system_provider": Field(dict, required=False),
    "base_image_provider": Field(dict, required=False),
}
_PROVIDER = {
    "supplier": Field(str, check=lambda v: bool(v.strip()), expected="the organisation that supplies them, e.g. 'Microsoft Corporation'"),
    "version": Field(str, check=lambda v: bool(v.strip()), expected="the version the package relies on, e.g. 'Windows 10 or later'"),
}
_REDISTRIBUTABLE = {
    "name": Field(str),
    "origin": Field(str, check=one_of("cuda-toolkit", "directstorage", "vcpkg", "msvc-crt"), expected="cuda-toolkit, directstorage, vcpkg or msvc-crt"),
    "license": Field(str),
    "supplier": Field(str),
    "version": Field(str, required=False),
    # The licence text shipped beside the library in the package (repository-relative path).  With
    # license_from_prebuilt it is only the stand-in a rehearsal may ship (package refuses it otherwise).
    "license_file": Field(str),
    # The licence file the redistributable's own package ships (DirectStorage's NuGet package: LICENSE.txt,
    # the terms of its native/bin/ DLLs), which the Windows job puts beside the DLLs it gives --prebuilt.
    "license_from_prebuilt": Field(str, required=False),
    # The vcpkg port whose installed files hold the DLL (origin vcpkg): the Windows job checks the DLL's version
    # resource against that port's installed version (vcpkg's status at the pinned baseline).
    "vcpkg_port": Field(str, required=False, check=matches(r"[a-z0-9][a-z0-9-]*"), expected="a vcpkg port name, e.g. 'ffmpeg'"),
    # A library the runtime loads by name (LoadLibrary), so no import table names it:
    # it is bundled whenever the library named here is.
    "loaded_by": Field(str, required=False),
    # The copyright notice of the library, where its supplier states one (SBOM copyright text).
    "copyright": Field(str, required=False),
}
_QUALIFICATION = {
    "advertised_prompt_tokens": Field(int, check=lambda v: 0 < v <= 10_000_000, expected="a token count 1..10000000"),
    "completion_tokens": Field(int, check=lambda v: 1 <= v <= 8192, expected="1..8192"),
    # Gate thresholds: finite and in range (a NaN threshold makes every comparison false,
    # so a gate that checks 'below the threshold' would pass whatever was measured).
    "min_decode_tokens_per_second": Field((int, float), check=_number_in(0, 1e6), expected=_range_text(0, 1e6, "tokens per second")),
    "min_prefill_tokens_per_second": Field((int, float), check=_number_in(0, 1e7), expected=_range_text(0, 1e7, "tokens per second")),
    "max_time_to_first_token_seconds": Field((int, float), check=_number_in(0, 3600), expected=_range_text(0, 3600, "seconds")),
    "max_restart_seconds": Field((int, float), check=_number_in(0, 86400), expected=_range_text(0, 86400, "seconds")),
    "max_vram_mib": Field(int, check=_number_in(0, 1 << 20, integer=True), expected=_range_text(0, 1 << 20, "MiB", integer=True) + " (and within gpu.vram_mib)"),
    "endpoint_port": Field(int, check=lambda v: 1 <= v <= 65535, expected="a TCP port"),
    # The fixed prompt of the decode/prefill/TTFT benchmark (the completion is completion_tokens).
    "benchmark_prompt_tokens": Field(int, check=lambda v: 0 < v <= 10_000_000, expected="a token count 1..10000000 (and within advertised_prompt_tokens)"),
    # What the runtime must report serving, where no packaged server-config.json binds it (container lane).
    "model_artifact_sha256": Field(str, required=False, check=is_sha256_hex, expected="64 lowercase hex"),
    "public_model_id": Field(str, required=False, check=matches(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"), expected="a model id such as 'q38-ninfer'"),
}


@dataclass(frozen=True)
class Redistributable:
    name: str
    origin: str
    license: str
    supplier: str
    license_file: str
    version: str | None = None
    loaded_by: str | None = None
    copyright: str | None = None
    license_from_prebuilt: str | None = None
    vcpkg_port: str | None = None


@dataclass(frozen=True)
class Provider:
    """Who provides the libraries of one kind the package does not bundle (system, driver, base image)."""

    supplier: str
    version: str


DRIVER_SUPPLIER = "NVIDIA Corporation"


@dataclass(frozen=True)
class HostDependency:
    """One thing the build host must provide: a pkg-config module or a tool, with its floor and origin."""

    name: str
    kind: str  # "pkg-config" | "tool"
    min_version: str | None = None
    debian: str | None = None
    vcpkg: str | None = None
    hosts: tuple[str, ...] = PLATFORMS
    declared_at: str = ""  # the key that declares it (for errors), e.g. build.host_dependencies[2]
    license: str | None = None  # as declared (SPDX), where the library reports none itself

    def applies_to(self, host: str) -> bool:
        return host in self.hosts

    def origin_for(self, host: str) -> str | None:
        """The package that provides it on `host` (Debian package on Linux, vcpkg port on Windows)."""
        return self.vcpkg if host.startswith("windows") else self.debian

    def requirement(self) -> str:
        return f"{self.name} >= {self.min_version}" if self.min_version else self.name

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "min_version": self.min_version,
            "debian": self.debian,
            "vcpkg": self.vcpkg,
            "hosts": list(self.hosts),
            "license": self.license,
        }


def parse_host_dependencies(items: list[Any], *, file: str, prefix: str, build_host: str | None) -> tuple[HostDependency, ...]:
    """Read [[...host_dependencies]] entries strictly.

    With `build_host` (a lane file), every entry that applies to that host must
    say where it comes from there, and pkg-config modules need the pkg-config
    tool declared too: the install step of the release workflow and the
    preflight's fix both come from these fields.
    """
    out: list[HostDependency] = []
    for index, item in enumerate(items):
        where = f"{prefix}[{index}]"
        raw = read_table(item, _HOST_DEPENDENCY, file=file, prefix=where)
        dependency = HostDependency(
            name=raw["name"],
            kind=raw["kind"],
            min_version=raw["min_version"],
            debian=raw["debian"],
            vcpkg=raw["vcpkg"],
            hosts=tuple(raw["hosts"]) if raw["hosts"] else PLATFORMS,
            declared_at=where,
            license=raw["license"],
        )
        if any((d.kind, d.name) == (dependency.kind, dependency.name) for d in out):
            raise InputError("declares a host dependency twice", file=file, field=f"{where}.name", found=dependency.name, expected="each module or tool once")
        if build_host is not None and dependency.applies_to(build_host) and dependency.origin_for(build_host) is None:
            key = "vcpkg" if build_host.startswith("windows") else "debian"
            raise InputError(
                f"does not say where the dependency comes from on the lane's {build_host} build host",
                file=file,
                field=f"{where}.{key}",
                found=None,
                expected="a vcpkg port, e.g. 'ffmpeg[avformat]'" if key == "vcpkg" else "a Debian/Ubuntu package, e.g. 'libavformat-dev'",
                why="the release workflow installs the build host's dependencies from these fields, and the preflight names them in its fix",
            )
        out.append(dependency)
    for host in PLATFORMS:
        modules = [d for d in out if d.kind == "pkg-config" and d.applies_to(host)]
        if modules and not any(d.kind == "tool" and d.name in ("pkg-config", "pkgconf") and d.applies_to(host) for d in out):
            raise InputError(
                "declares pkg-config modules but not the pkg-config tool itself",
                file=file,
                field=modules[0].declared_at,
                found=modules[0].name,
                expected=f"also an entry {{name = \"pkg-config\", kind = \"tool\"}} for {host}",
                why="the modules are found and checked with pkg-config, which the build host must then provide",
            )
    if build_host is not None and build_host.startswith("linux") and not any((d.kind, d.name) == ("tool", HOST_COMPILER) and d.applies_to(build_host) for d in out):
        raise InputError(
            "does not declare the build host's C++ compiler",
            file=file,
            field=prefix,
            found=sorted(d.name for d in out),
            expected=f"an entry {{name = \"{HOST_COMPILER}\", kind = \"tool\", debian = \"g++\"}} for {build_host}",
            why="nvcc compiles host code with it, so the bytes depend on its version: the build records it and rebuild --verify compares it before compiling",
        )
    return tuple(out)


@dataclass(frozen=True)
class Lane:
    id: str
    short_name: str
    kind: str
    title: str
    file: Path
    file_sha256: str
    gpu_name: str
    compute_capability: str
    minimum_driver_major: int
    vram_mib: int
    cuda_architecture: str
    cuda_toolkit: str
    build_host: str
    target_platform: str
    asset_platform: str
    component_repository: str
    version: str
    beta: int | None  # the current cut's N, from the cut ledger (not the lane file)
    tag_pattern: str
    stem_pattern: str
    release_id_pattern: str
    deployment_profile_pattern: str
    build_profile_pattern: str
    source_repository: str
    source_commit: str | None
    upstream_base: str | None
    required_checks: tuple[str, ...]  # GitHub Actions check run (job) names of the runtime repository's CI, at the cut's commit
    cmake_args: tuple[str, ...]
    targets: tuple[str, ...]
    binaries: tuple[str, ...]
    optional_binaries: tuple[str, ...]
    package_layout: str
    runtime_license: str
    system_libraries: tuple[str, ...]
    driver_libraries: tuple[str, ...]
    base_image_libraries: tuple[str, ...]  # typed, for a registry base; see lane_base_libraries for the derived ones
    redistributables: tuple[Redistributable, ...]
    server_config: str | None
    release_spec: str | None
    support_scripts: tuple[str, ...]
    base_image: str | None = None  # package.base_image: the package-base definition the base libraries are derived from
    qualification: dict[str, Any] = field(default_factory=dict)
    providers: dict[str, Provider] = field(default_factory=dict)  # "system", "driver", "base-image"
    cuts_dir: Path | None = None
    host_dependencies: tuple[HostDependency, ...] = ()

    # Names derived from the patterns for one beta number (default: the current cut's).
    def _render(self, pattern: str, beta: int | None = None) -> str:
        n = self.beta if beta is None else beta
        if n is None and "{n}" in pattern:
            raise InputError(
                f"lane {self.id} has no cut of version {self.version} yet",
                file=self.ledger_file(),
                why="the beta number N of a component comes from the lane's cut ledger, never from the lane file",
                fix=f"record one with 'python -m pipeline cut --lane {self.id} --source URL_OR_PATH@COMMIT'",
            )
        if n is not None and not is_beta(n):
            raise InputError("is not a beta number", file=self.file, field="component.beta", found=n, expected=BETA_EXPECTED,
                             why="names, tags and release ids are rendered only for a real beta.N cut")
        return pattern.format(version=self.version, n=n if n is not None else "")

    def ledger_file(self) -> Path:
        return ledger_path(self.cuts_dir or cuts_dir_for(self.file.parent), self.id)

    def render_tag(self, version: str, n: int) -> str:
        return self.tag_pattern.format(version=version, n=n)

    def ledger(self):
        """The lane's cut ledger as it is on disk now."""
        return load_ledger(self.cuts_dir or cuts_dir_for(self.file.parent), self.id, tag_for=self.render_tag)

    def tag(self, beta: int | None = None) -> str:
        return self._render(self.tag_pattern, beta)

    def stem(self, beta: int | None = None) -> str:
        return self._render(self.stem_pattern, beta)

    def release_id(self, beta: int | None = None) -> str:
        return self._render(self.release_id_pattern, beta)

    def deployment_profile(self, beta: int | None = None) -> str:
        return self._render(self.deployment_profile_pattern, beta)

    def build_profile(self, beta: int | None = None) -> str:
        return self._render(self.build_profile_pattern, beta)

    def tag_regex(self) -> re.Pattern[str]:
        return pattern_regex(self.tag_pattern, self.version)

    def beta_from_tag(self, tag: str) -> int:
        match = self.tag_regex().fullmatch(tag) if isinstance(tag, str) else None  # a manifest's release_tag may be any JSON value
        if not match:
            raise InputError(
                "component tag does not match the lane's tag pattern",
                file=self.file,
                field="component.tag_pattern",
                found=tag,
                expected=f"{self.tag_pattern} with version {self.version}, e.g. {self.tag(self.beta or 1)}",
            )
        return int(match.group("n"))

    @property
    def is_windows(self) -> bool:
        return self.target_platform.startswith("windows")

    @property
    def prebuilt_licences(self) -> dict[str, tuple[str, ...]]:
        """Licence file of the --prebuilt folder -> the redistributables whose terms it is (license_from_prebuilt)."""
        found: dict[str, list[str]] = {}
        for item in self.redistributables:
            if item.license_from_prebuilt is not None:
                found.setdefault(item.license_from_prebuilt, []).append(item.name)
        return {name: tuple(users) for name, users in sorted(found.items())}

    @property
    def executable_suffix(self) -> str:
        return ".exe" if self.is_windows else ""

    def binary_file(self, binary: str) -> str:
        return binary + self.executable_suffix

    def with_overrides(self, **changes: Any) -> Lane:
        """A copy with some facts changed (tests and `--lanes-dir` experiments)."""
        return replace(self, **changes)


def pattern_regex(pattern: str, version: str) -> re.Pattern[str]:
    """Regex for a tag pattern: {version} is literal, {n} a beta number without leading zero."""
    out = []
    for literal, name, _spec, _conv in string.Formatter().parse(pattern):
        out.append(re.escape(literal))
        if name == "version":
            out.append(re.escape(version))
        elif name == "n":
            out.append(r"(?P<n>[1-9][0-9]*)")
    return re.compile("".join(out))


def _check_pattern(file: Path, key: str, pattern: str, *, needs_n: bool) -> None:
    if len(pattern) > MAX_PATTERN:
        raise InputError("is longer than a name pattern may be", file=file, field=key, found=pattern[:MAX_PATTERN] + "…", expected=f"at most {MAX_PATTERN} characters")
    try:
        parsed = list(string.Formatter().parse(pattern))
    except ValueError as exc:
        raise InputError(f"is not a valid pattern ({exc})", file=file, field=key, found=pattern) from None
    names = [name for _lit, name, _spec, _conv in parsed if name is not None]
    unknown = [n for n in names if n not in PATTERN_FIELDS]
    if unknown:
        raise InputError(
            "uses an unknown placeholder",
            file=file,
            field=key,
            found="{" + unknown[0] + "}",
            expected="only {version} and {n}",
        )
    for literal, name, spec, conversion in parsed:
        if name is not None and (spec or conversion):
            raise InputError(
                "gives a placeholder a format or conversion",
                file=file,
                field=key,
                found=pattern,
                expected="bare {version} and {n}, e.g. 'ninfer-rtx4090-native-v{version}-beta.{n}'",
                why="a format spec such as {n:>999} pads or reshapes the name; names are fixed by the documented placeholders only",
            )
        if not PATTERN_LITERAL.fullmatch(literal):
            bad = next(c for c in literal if not PATTERN_LITERAL.fullmatch(c))
            raise InputError(
                f"contains {bad!r} outside its placeholders",
                file=file,
                field=key,
                found=pattern,
                expected="letters, digits, '.', '_', '+' and '-' around {version} and {n}",
                why="the rendered pattern is a file name, a tag or a release id; '/', '..' or a drive would steer it outside its folder",
            )
    if pattern.startswith((".", "-")):
        raise InputError("starts with '.' or '-'", file=file, field=key, found=pattern, expected="a name starting with a letter or digit")
    if needs_n and "n" not in names:
        raise InputError(
            "must contain the beta number placeholder {n}",
            file=file,
            field=key,
            found=pattern,
            expected="a pattern such as 'v{version}-qwen38-4090-beta.{n}'",
            why="every component cut is a new beta.N tag; a tag without N would be reused, and tags are never moved",
        )
    if needs_n and "version" not in names:
        raise InputError("must contain {version}", file=file, field=key, found=pattern, expected="a pattern containing {version}")


def _check_rendered_names(file: Path, comp: dict[str, Any], asset_platform: str) -> None:
    """Every name a pattern renders (for any beta) is one safe file name: checked here, at load time."""
    for beta in (MIN_BETA, MAX_BETA):  # N comes from the cut ledger; both ends of its range must render safely
        stem = comp["stem_pattern"].format(version=comp["version"], n=beta)
        # The longest names of the set (pipeline/assets.py): the package's SBOM and inner sums, the source.
        for name in (f"{stem}-{asset_platform}.SHA256SUMS", f"{stem}-{asset_platform}.spdx.json", f"{stem}-source.tar.gz", stem):
            safe_component(name, file=file, field="component.stem_pattern", expected="a pattern whose rendered asset names are plain file names of at most 255 characters")
        for key in ("release_id_pattern", "tag_pattern", "deployment_profile", "build_profile"):
            safe_component(comp[key].format(version=comp["version"], n=beta), file=file, field=f"component.{key}", max_len=200,
                           expected="a pattern that renders one plain name of at most 200 characters")


def _read_redistributables(pkg: dict[str, Any], file: Path) -> tuple[Redistributable, ...]:
    """The lane's [[package.redistributables]], each name, licence file and loader checked."""
    redistributables = tuple(
        Redistributable(**read_table(item, _REDISTRIBUTABLE, file=file, prefix=f"package.redistributables[{i}]"))
        for i, item in enumerate(pkg["redistributables"])
    )
    names = [r.name.lower() for r in redistributables]
    for index, item in enumerate(redistributables):
        if names.count(item.name.lower()) > 1:
            raise InputError("declares a redistributable twice", file=file, field=f"package.redistributables[{index}].name", found=item.name)
        where = f"package.redistributables[{index}]"
        safe_component(item.name, file=file, field=f"{where}.name", expected="a library file name such as 'libcurl.dll'")
        # The text is bundled into the published package: only the repository's licence folder
        # may provide it (an absolute or '..' path would publish any file of the host).
        licence = safe_relative(item.license_file, REPO_ROOT, file=file, field=f"{where}.license_file", what="the repository",
                                expected=f"a path relative to the repository root under {LICENSES_DIR}/, e.g. {LICENSES_DIR}/<licence>.txt")
        licence_dir = REPO_ROOT / LICENSES_DIR
        if licence.resolve().parent != licence_dir.resolve():
            raise InputError(
                f"licence file is not in the repository's {LICENSES_DIR}/ folder",
                file=file,
                field=f"{where}.license_file",
                found=item.license_file,
                expected=f"{LICENSES_DIR}/<licence>.txt",
                why="the text ships in the published package; only the reviewed licence folder may provide it",
            )
        if not licence.is_file():
            raise InputError(
                "licence file does not exist",
                file=file,
                field=f"{where}.license_file",
                found=item.license_file,
                expected=f"a path relative to the repository root, e.g. {LICENSES_DIR}/<licence>.txt",
            )
        if item.license_from_prebuilt is not None:
            _check_prebuilt_licence_name(item.license_from_prebuilt, names, file=file, field=f"{where}.license_from_prebuilt")
        if item.loaded_by is not None and item.loaded_by.lower() not in names:
            raise InputError(
                "is loaded by a library the lane does not declare",
                file=file,
                field=f"package.redistributables[{index}].loaded_by",
                found=item.loaded_by,
                expected="the name of another [[package.redistributables]] entry",
            )
    return redistributables


def _check_vcpkg_ports(redistributables: tuple[Redistributable, ...], host_dependencies: tuple[HostDependency, ...], file: Path) -> None:
    # A DLL from vcpkg names its port, one the lane's build-host dependencies install (host_packages.py vcpkg-manifest).
    ports = sorted({d.vcpkg.partition("[")[0] for d in host_dependencies if d.vcpkg})
    for index, item in enumerate(redistributables):
        field = f"package.redistributables[{index}].vcpkg_port"
        if item.origin == "vcpkg" and item.vcpkg_port not in ports:
            raise InputError("a DLL from vcpkg must name the port that installs it, one of the lane's build-host dependencies", file=file, field=field,
                             found=item.vcpkg_port, expected=" or ".join(repr(p) for p in ports) or "a [[build.host_dependencies]] entry with a vcpkg port")
        if item.origin != "vcpkg" and item.vcpkg_port is not None:
            raise InputError("names a vcpkg port for a DLL that does not come from vcpkg", file=file, field=field, found=item.vcpkg_port, expected=f"no vcpkg_port (origin {item.origin})")


def _check_prebuilt_licence_name(name: str, redistributables: list[str], *, file: Path, field: str) -> None:
    # A plain file name of the --prebuilt folder, and no library's: build takes it as a licence text, not a DLL.
    safe_component(name, file=file, field=field, expected="a plain file name such as 'LICENSE.txt'")
    if name.lower() in redistributables or name.lower().endswith((".dll", ".so", ".exe")) or ".so." in name.lower():
        raise InputError("names a library or program, not a licence text", file=file, field=field, found=name,
                         expected="the licence file the redistributable's package ships, e.g. 'LICENSE.txt'")


def _read_providers(pkg: dict[str, Any], gpu: dict[str, Any], file: Path) -> dict[str, Provider]:
    """Who supplies the target-provided libraries, per kind (the SBOMs name a supplier and version for each)."""
    # The driver libraries are the NVIDIA driver's, at least the lane's minimum version.
    providers = {"driver": Provider(DRIVER_SUPPLIER, f"{gpu['minimum_driver_major']} or later")}
    for kind, key, libraries in (("system", "system_provider", pkg["system_libraries"]), ("base-image", "base_image_provider", pkg["base_image_libraries"] or ([pkg["base_image"]] if pkg["base_image"] else []))):
        if pkg[key] is not None:
            providers[kind] = Provider(**read_table(pkg[key], _PROVIDER, file=file, prefix=f"package.{key}"))
        elif libraries:
            raise InputError(
                f"the lane lists {kind} libraries but not who provides them",
                file=file,
                field=f"package.{key}",
                expected="a table with supplier and version",
                why="every component of the SBOMs names its supplier and version, the target-provided ones too",
                fix=f"add [package.{key}] with supplier = \"...\" and version = \"...\"",
            )
    return providers


def _check_base_image(pkg: dict[str, Any], file: str) -> None:
    """package.base_image (derived libraries) and package.base_image_libraries (typed) exclude each other."""
    if pkg["base_image"] is None:
        return
    safe_relative(pkg["base_image"], REPO_ROOT, file=file, field="package.base_image", what="the repository", expected="containers/<...>.toml")
    if pkg["base_image_libraries"]:
        raise InputError(
            "names a package base and types its libraries too",
            file=file, field="package.base_image_libraries", found=pkg["base_image_libraries"],
            expected="no base_image_libraries beside package.base_image",
            why="the libraries a package base ships are read from its lock (which package ships each soname); a typed list beside it would drift",
            fix="delete package.base_image_libraries",
        )


def load_lane(path: Path) -> Lane:
    data = read_toml(path)
    file = str(path)
    top = read_table(data, _TOP, file=file)
    gpu = read_table(top["gpu"], _GPU, file=file, prefix="gpu")
    cuda = read_table(top["cuda"], _CUDA, file=file, prefix="cuda")
    plat = read_table(top["platform"], _PLATFORM, file=file, prefix="platform")
    comp = read_table(top["component"], _COMPONENT, file=file, prefix="component")
    src = read_table(top["source"], _SOURCE, file=file, prefix="source")
    build = read_table(top["build"], _BUILD, file=file, prefix="build")
    pkg = read_table(top["package"], _PACKAGE, file=file, prefix="package")
    qual = {k: v for k, v in read_table(top["qualification"], _QUALIFICATION, file=file, prefix="qualification").items() if v is not None}

    if qual["max_vram_mib"] > gpu["vram_mib"]:
        raise InputError("the VRAM gate allows more memory than the GPU has", file=file, field="qualification.max_vram_mib", found=qual["max_vram_mib"], expected=f"at most gpu.vram_mib ({gpu['vram_mib']})")
    if qual["benchmark_prompt_tokens"] > qual["advertised_prompt_tokens"]:
        raise InputError("the benchmark prompt is longer than the advertised context", file=file, field="qualification.benchmark_prompt_tokens",
                         found=qual["benchmark_prompt_tokens"], expected=f"at most advertised_prompt_tokens ({qual['advertised_prompt_tokens']})")
    if path.stem != top["id"]:
        raise InputError("lane id must equal the file name", file=file, field="id", found=top["id"], expected=repr(path.stem))
    if not top["id"].startswith(f"rtx{top['short_name']}-"):
        raise InputError("short_name must be the GPU number in the id", file=file, field="short_name", found=top["short_name"], expected=repr(top["id"][3:7]))
    expected_kind = "container" if top["id"].endswith("-container") else "windows-native"
    if top["kind"] != expected_kind:
        raise InputError("kind does not match the id", file=file, field="kind", found=top["kind"], expected=repr(expected_kind))
    arch_cc = CUDA_ARCHITECTURES[cuda["architecture"]]
    if gpu["compute_capability"] != arch_cc:
        raise InputError(
            "GPU compute capability does not match the CUDA architecture",
            file=file,
            field="gpu.compute_capability",
            found=gpu["compute_capability"],
            expected=f"{arch_cc!r} for cuda.architecture {cuda['architecture']!r}",
        )
    if not plat["asset_platform"].startswith(f"{plat['target']}-cuda{cuda['toolkit']}"):
        raise InputError(
            "asset platform must name the target platform and CUDA toolkit",
            file=file,
            field="platform.asset_platform",
            found=plat["asset_platform"],
            expected=f"'{plat['target']}-cuda{cuda['toolkit']}[-rtxNNNN]'",
        )
    for key in ("tag_pattern", "stem_pattern", "release_id_pattern", "deployment_profile", "build_profile"):
        _check_pattern(path, f"component.{key}", comp[key], needs_n=(key == "tag_pattern"))
    _check_rendered_names(path, comp, plat["asset_platform"])
    probe = pattern_regex(comp["tag_pattern"], comp["version"])
    if not probe.fullmatch(comp["tag_pattern"].format(version=comp["version"], n=1)):
        raise InputError("tag pattern does not round-trip", file=file, field="component.tag_pattern", found=comp["tag_pattern"])
    if not re.fullmatch(r"v[0-9]+\.[0-9]+\.[0-9]+-[a-z0-9.-]+", comp["tag_pattern"].format(version=comp["version"], n=1)):
        raise InputError(
            "tag pattern must produce a tag 'vX.Y.Z-<lane words>'",
            file=file,
            field="component.tag_pattern",
            found=comp["tag_pattern"],
            expected="e.g. 'v{version}-qwen38-4090-beta.{n}'",
        )
    for key in ("binaries", "optional_binaries", "targets"):
        for index, name in enumerate(build[key]):
            if not re.fullmatch(BINARY_NAME, name):
                raise InputError("is not a valid binary or target name", file=file, field=f"build.{key}[{index}]", found=name, expected="lowercase letters, digits, '-' and '_'")
    if "ninfer-serve" not in build["binaries"]:
        raise InputError("the server binary must be built", file=file, field="build.binaries", found=build["binaries"], expected="a list containing 'ninfer-serve'")
    missing_targets = [b for b in build["binaries"] if b not in build["targets"]]
    if missing_targets:
        raise InputError("a required binary is not among the build targets", file=file, field="build.targets", found=build["targets"], expected=f"a list containing {missing_targets[0]!r}")
    for index, arg in enumerate(build["cmake_args"]):
        if arg.startswith(("-DCMAKE_CUDA_ARCHITECTURES", "-DCMAKE_BUILD_TYPE", "-DCMAKE_CUDA_COMPILER", "-DNINFER_PATCH_STACK_SHA", "-DNINFER_UPSTREAM_BASE_SHA", "-DNINFER_SOURCE_DIRTY", "-DNINFER_BUILD_PROFILE")):
            raise InputError(
                "sets a value the pipeline owns",
                file=file,
                field=f"build.cmake_args[{index}]",
                found=arg,
                why="architecture, build type, compiler and identity come from the lane's typed fields and the source commit",
                fix="remove the argument; change cuda.architecture or component fields instead",
            )
    redistributables = _read_redistributables(pkg, file)
    providers = _read_providers(pkg, gpu, file)
    host_dependencies = parse_host_dependencies(build["host_dependencies"] or [], file=file, prefix="build.host_dependencies", build_host=plat["build_host"])
    _check_vcpkg_ports(redistributables, host_dependencies, file)
    expected_layout = "binary-archive" if expected_kind == "container" else "native-asset-set"
    _check_base_image(pkg, file)
    if pkg["layout"] != expected_layout:
        raise InputError("package layout does not fit the lane kind", file=file, field="package.layout", found=pkg["layout"], expected=repr(expected_layout))
    if expected_layout == "native-asset-set":
        for key in ("server_config", "release_spec"):
            if not pkg[key]:
                raise InputError("a Windows lane needs its serving contract file", file=file, field=f"package.{key}", expected="a path under packaging/windows/lanes/")
        if len(pkg["support_scripts"]) != 4:
            raise InputError("a Windows lane ships exactly the four lifecycle scripts", file=file, field="package.support_scripts", found=pkg["support_scripts"], expected="four .ps1 paths")
        for index, script in enumerate(pkg["support_scripts"]):
            # Shipped in the package and the asset set: only the repository's own scripts.
            where = f"package.support_scripts[{index}]"
            located = safe_relative(script, REPO_ROOT, file=file, field=where, what="the repository", expected=f"{SCRIPTS_DIR}/<Script>.ps1")
            if not located.resolve().is_relative_to((REPO_ROOT / SCRIPTS_DIR).resolve()):
                raise InputError(f"lifecycle script is not in the repository's {SCRIPTS_DIR}/ folder", file=file, field=where, found=script, expected=f"{SCRIPTS_DIR}/<Script>.ps1")

    raw = path.read_bytes()
    cuts_dir = cuts_dir_for(path.parent)
    current = load_ledger(cuts_dir, top["id"], tag_for=lambda version, n: comp["tag_pattern"].format(version=version, n=n)).current(comp["version"])
    return Lane(
        id=top["id"],
        short_name=top["short_name"],
        kind=top["kind"],
        title=top["title"],
        file=path,
        file_sha256=sha256_bytes(raw),
        gpu_name=gpu["name"],
        compute_capability=gpu["compute_capability"],
        minimum_driver_major=gpu["minimum_driver_major"],
        vram_mib=gpu["vram_mib"],
        cuda_architecture=cuda["architecture"],
        cuda_toolkit=cuda["toolkit"],
        build_host=plat["build_host"],
        target_platform=plat["target"],
        asset_platform=plat["asset_platform"],
        component_repository=comp["repository"],
        version=comp["version"],
        beta=current.n if current else None,
        tag_pattern=comp["tag_pattern"],
        stem_pattern=comp["stem_pattern"],
        release_id_pattern=comp["release_id_pattern"],
        deployment_profile_pattern=comp["deployment_profile"],
        build_profile_pattern=comp["build_profile"],
        source_repository=src["repository"],
        source_commit=src["commit"],
        upstream_base=src["upstream_base"],
        required_checks=check_names(src["required_checks"], file=file, field="source.required_checks"),
        cmake_args=tuple(build["cmake_args"]),
        targets=tuple(build["targets"]),
        binaries=tuple(build["binaries"]),
        optional_binaries=tuple(build["optional_binaries"] or ()),
        package_layout=pkg["layout"],
        runtime_license=pkg["license"],
        system_libraries=tuple(pkg["system_libraries"]),
        driver_libraries=tuple(pkg["driver_libraries"]),
        base_image_libraries=tuple(pkg["base_image_libraries"] or ()),
        base_image=pkg["base_image"],
        redistributables=redistributables,
        server_config=pkg["server_config"],
        release_spec=pkg["release_spec"],
        support_scripts=tuple(pkg["support_scripts"] or ()),
        qualification=qual,
        providers=providers,
        cuts_dir=cuts_dir,
        host_dependencies=host_dependencies,
    )


def cuts_dir_for(lanes_dir: Path) -> Path:
    """The cut ledgers live beside the lane files: runtime/lanes/ -> runtime/cuts/."""
    return lanes_dir.parent / "cuts"


def load_lanes(lanes_dir: Path | None = None) -> dict[str, Lane]:
    directory = lanes_dir or DEFAULT_LANES_DIR
    files = sorted(directory.glob("*.toml"))
    if not files:
        raise InputError("no lane files found", file=directory, expected="runtime/lanes/<lane-id>.toml files")
    lanes: dict[str, Lane] = {}
    short: dict[str, str] = {}
    for path in files:
        lane = load_lane(path)
        if lane.short_name in short:
            raise InputError("two lanes share a short name", file=path, field="short_name", found=lane.short_name, expected=f"a name not used by {short[lane.short_name]}")
        short[lane.short_name] = lane.id
        lanes[lane.id] = lane
    return lanes


def find_lane(name: str, lanes_dir: Path | None = None) -> Lane:
    """Look a lane up by id ('rtx4090-windows-native') or short name ('4090')."""
    lanes = load_lanes(lanes_dir)
    for lane in lanes.values():
        if name in (lane.id, lane.short_name):
            return lane
    from pipeline.errors import UsageError

    raise UsageError(
        f"unknown lane {name!r}",
        expected="one of " + ", ".join(f"{lane.id} ({lane.short_name})" for lane in lanes.values()),
        fix="run 'python -m pipeline lanes' to list them",
    )


def current_host_platform() -> str:
    system = host_platform_module.system().lower()
    machine = host_platform_module.machine().lower()
    arch = {"amd64": "x86_64", "x86_64": "x86_64"}.get(machine, machine)
    return f"{system}-{arch}"

"""Check a build host's declared dependencies and record exactly what was found.

The build's environment is scrubbed (pipeline/build.py), so nothing here reads
the caller's `PKG_CONFIG_PATH` or `PATH`: the tools are looked up on the
build's own PATH and pkg-config runs with the search path the build passes to
CMake, so the preflight checks what the compile will see.  For each declared
dependency it records the version (`pkg-config --modversion`, or the first
dotted number of `<tool> --version`) and where it really came from: the
Debian package that owns its `.pc` file or executable (`dpkg-query -S`,
`dpkg-query -W -f='${Version}'`), on a Windows host the vcpkg port whose
installed status lists it, else a local build (`origin: local`), with the
files' SHA-256, the upstream release and the licence pipeline/lanework/hostlibs.py
finds.  No host folder outside the system's own is recorded: a module found
through `--pkg-config-path` is named by its `.pc` file's name.  Every
dependency that is missing or below its floor is reported in one error, with
the one command that installs them all.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import EnvironmentProblem, UsageError
from pipeline.formats.components import is_version_word
from pipeline.formats.lanes import HostDependency
from pipeline.lanework import hostlibs

# The system part of the compile's PATH (after the toolchain's folders): host compilers and tools are found here only.
BUILD_PATH = ("/usr/local/bin", "/usr/bin", "/bin")
TIMEOUT = 30
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)+|[0-9]+")
PKG_CONFIG_TOOLS = ("pkg-config", "pkgconf")


def host_probe_environment(windows: bool) -> tuple[list[str], Mapping[str, str]]:
    """(PATH, base environment) the build-host dependencies are probed with: on Linux the fixed system PATH
    and a C.UTF-8 locale (the build's own), on Windows the caller's (MSVC and vcpkg live on its PATH)."""
    if windows:
        return os.environ.get("PATH", "").split(os.pathsep), os.environ
    return list(BUILD_PATH), {"LC_ALL": "C.UTF-8", "HOME": os.environ.get("HOME", "/tmp")}


def _run(argv: Sequence[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(list(argv), env=dict(env), capture_output=True, text=True, errors="replace", timeout=TIMEOUT, check=False)
    except (FileNotFoundError, PermissionError, subprocess.TimeoutExpired):
        return None


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"[0-9]+", text))


def at_least(found: str, floor: str) -> bool:
    a, b = version_tuple(found), version_tuple(floor)
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)) >= b + (0,) * (width - len(b))


def parse_search_path(values: Sequence[str | os.PathLike[str]] | None) -> tuple[str, ...]:
    """The explicit pkg-config search folders: absolute, existing, in order, each once."""
    out: list[str] = []
    for value in values or ():
        for part in str(value).split(os.pathsep):
            if not part:
                continue
            path = Path(part)
            if not path.is_absolute() or not path.is_dir():
                raise UsageError(
                    "a pkg-config search folder must be an existing absolute folder",
                    field="--pkg-config-path",
                    found=part,
                    expected=f"e.g. /opt/ffmpeg-7.1/lib/pkgconfig (folders separated by {os.pathsep!r} or given several times)",
                )
            if str(path) not in out:
                out.append(str(path))
    return tuple(out)


ORIGINS = ("debian", "vcpkg", "local")
# Folders whose names may be recorded: the system's own (the build's fixed PATH), the same on every host.
PUBLIC_ROOTS = ("/usr/", "/bin/", "/lib/")


def public_name(path: str) -> str:
    """`path` where it is a system folder's (the same on every host), else the file's name alone."""
    return path if path.startswith(PUBLIC_ROOTS) else Path(path).name


@dataclass(frozen=True)
class Found:
    """One declared dependency as the host provides it.

    `path` and `libdir` are where it is on this host: used to run and probe, never recorded
    (a prefix given with --pkg-config-path is private; its files are recorded by name and SHA-256).
    """

    dependency: HostDependency
    version: str
    path: str  # the .pc file or the executable
    debian_package: str | None = None
    debian_version: str | None = None
    libdir: str | None = None  # a pkg-config module's library folder
    origin: str = "local"  # ORIGINS
    vcpkg: dict[str, str] | None = None  # the owning port, from vcpkg's installed status (Windows hosts)
    file_sha256: str | None = None  # the .pc file's or the executable's
    libraries: tuple[hostlibs.LibraryFile, ...] = ()
    release: dict[str, str] | None = None  # the upstream release the library states
    license: str | None = None
    license_source: str | None = None  # "self-reported: <how>" | "declared"

    def sonames(self) -> list[str]:
        return [lib.soname or lib.file for lib in self.libraries]

    def to_json(self) -> dict[str, Any]:
        kind = self.dependency.kind
        name = f"{self.dependency.name}.pc" if kind == "pkg-config" else public_name(self.path)
        return {
            "name": self.dependency.name,
            "kind": kind,
            "min_version": self.dependency.min_version,
            "version": self.version,
            "origin": self.origin,
            "debian_package": self.debian_package,
            "debian_version": self.debian_version,
            "vcpkg": dict(self.vcpkg) if self.vcpkg else None,
            # The .pc file by module name, a tool by its system path (or its name alone): never a private folder.
            "file": name,
            "file_sha256": self.file_sha256,
            "libraries": [lib.to_json() for lib in self.libraries],
            "release": dict(self.release) if self.release else None,
            "license": self.license,
            "license_source": self.license_source,
        }


@dataclass
class HostCheck:
    """The result of the preflight: what was declared where, what was found, which search paths the build passes."""

    declared_by: str
    host: str
    path: tuple[str, ...]
    pkg_config_path: tuple[str, ...]
    found: list[Found] = field(default_factory=list)
    pkg_config: str | None = None
    pkg_config_default_path: str | None = None
    os_release: dict[str, str] | None = None
    build_environment: dict[str, Any] | None = None  # the pinned container and Debian snapshot (formats/build_environment.py)

    def dependencies_json(self) -> list[dict[str, Any]]:
        return [f.to_json() for f in sorted(self.found, key=lambda f: (f.dependency.kind, f.dependency.name))]

    def environment_json(self) -> dict[str, Any]:
        return {
            "declared_by": self.declared_by,
            "host": self.host,
            # The fixed system PATH of a Linux build; a Windows build's PATH is the caller's (private): not recorded.
            "PATH": None if self.host.startswith("windows") else list(self.path),
            # How many explicit folders pkg-config searched first (their names are private; each module's origin says where it came from).
            "pkg_config_explicit_folders": len(self.pkg_config_path),
            "pkg_config": public_name(self.pkg_config) if self.pkg_config else None,
            "pkg_config_default_path": self.pkg_config_default_path,
            "os_release": self.os_release,
            "build_environment": self.build_environment,
        }

    def build_env(self) -> dict[str, str]:
        """What the compile's environment gets for pkg-config (nothing when no folder was given)."""
        return {"PKG_CONFIG_PATH": os.pathsep.join(self.pkg_config_path)} if self.pkg_config_path else {}

    def cmake_args(self) -> list[str]:
        # CMake's FindPkgConfig would search PATH itself; name the one the preflight checked.
        return [f"-DPKG_CONFIG_EXECUTABLE={self.pkg_config}"] if self.pkg_config else []

    def library_dirs(self) -> list[str]:
        """Library folders of modules found through an explicit search folder (to run the binaries)."""
        dirs: list[str] = []
        for item in self.found:
            if item.libdir and any(item.path.startswith(p.rstrip("/") + "/") for p in self.pkg_config_path) and item.libdir not in dirs:
                dirs.append(item.libdir)
        return dirs


def os_release(path: Path = Path("/etc/os-release")) -> dict[str, str] | None:
    """ID and VERSION_ID of the host's distribution (the namespace of its package versions), if it says."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")[:16384]
    except OSError:
        return None
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key in ("ID", "VERSION_ID"):
            values[key] = value.strip().strip('"').strip("'")[:64]
    return values or None


def _owner(path: str, env: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(package, version) of the Debian package owning `path`, or (None, None)."""
    dpkg = shutil.which("dpkg-query", path=env.get("PATH"))
    if dpkg is None:
        return None, None
    candidates = [os.path.realpath(path), path]
    candidates += [c[len("/usr"):] for c in list(candidates) if c.startswith("/usr/")]  # merged-/usr hosts
    for candidate in dict.fromkeys(candidates):
        result = _run([dpkg, "-S", candidate], env)
        if result is None or result.returncode != 0:
            continue
        for line in result.stdout.splitlines():
            if line.startswith("diversion ") or ": " not in line:
                continue
            package = line.split(": ", 1)[0].split(",")[0].strip()
            version = _run([dpkg, "-W", "-f=${Version}", package], env)
            name = package.split(":", 1)[0]  # 'zlib1g-dev:amd64' -> the package name; the host's architecture is implied
            if version is not None and version.returncode == 0 and version.stdout.strip():
                return name, version.stdout.strip()
            return name, None
    return None, None


def _tool_version(executable: str, env: Mapping[str, str]) -> str | None:
    result = _run([executable, "--version"], env)
    if result is None or result.returncode != 0:
        return None
    for line in (result.stdout or result.stderr).splitlines():
        match = _NUMBER.search(line)
        if line.strip() and match:
            return match.group(0)
        if line.strip():
            return None
    return None


def check(
    dependencies: Sequence[HostDependency],
    *,
    host: str,
    declared_by: str,
    declaration_file: str,
    path: Sequence[str],
    pkg_config_path: Sequence[str] = (),
    base_env: Mapping[str, str] | None = None,
) -> HostCheck:
    """Check every dependency that applies to `host`; raise one EnvironmentProblem naming all that are missing."""
    result, problems = probe(dependencies, host=host, declared_by=declared_by, path=path, pkg_config_path=pkg_config_path, base_env=base_env)
    if problems:
        raise _missing(problems, host=host, declaration_file=declaration_file, pkg_config_path=pkg_config_path)
    return result


def probe(
    dependencies: Sequence[HostDependency],
    *,
    host: str,
    declared_by: str,
    path: Sequence[str],
    pkg_config_path: Sequence[str] = (),
    base_env: Mapping[str, str] | None = None,
) -> tuple[HostCheck, list[tuple[HostDependency, str]]]:
    """What this host provides of `dependencies`, and (dependency, reason) for each it lacks or has below its floor."""
    env = dict(base_env or {})
    env["PATH"] = os.pathsep.join(path)
    env.pop("PKG_CONFIG_LIBDIR", None)
    env.pop("PKG_CONFIG_SYSROOT_DIR", None)
    env.pop("PKG_CONFIG_PATH", None)
    if pkg_config_path:
        env["PKG_CONFIG_PATH"] = os.pathsep.join(pkg_config_path)
    result = HostCheck(declared_by=declared_by, host=host, path=tuple(path), pkg_config_path=tuple(pkg_config_path), os_release=os_release())
    applicable = [d for d in dependencies if d.applies_to(host)]
    problems = _probe_tools([d for d in applicable if d.kind == "tool"], result, env)
    modules = [d for d in applicable if d.kind == "pkg-config"]
    if modules and result.pkg_config is None:
        return result, problems + [(d, "not checked: the pkg-config tool is missing") for d in modules]
    if result.pkg_config is not None:
        default = _run([result.pkg_config, "--variable=pc_path", "pkg-config"], env)
        searched = default.stdout.strip() if default is not None and default.returncode == 0 else ""
        # pkg-config's built-in folders are the system's; one under a private root (a vcpkg checkout) is not recorded.
        if searched and all(part.startswith(PUBLIC_ROOTS) for part in searched.split(os.pathsep)):
            result.pkg_config_default_path = searched
    problems += _probe_modules(modules, result, env)
    return result, problems


def _probe_tools(tools: Sequence[HostDependency], result: HostCheck, env: dict[str, str]) -> list[tuple[HostDependency, str]]:
    problems: list[tuple[HostDependency, str]] = []
    for dependency in tools:
        executable = shutil.which(dependency.name, path=env["PATH"])
        if executable is None:
            problems.append((dependency, f"the tool {dependency.name} is not on the build's PATH ({env['PATH']})"))
            continue
        version = _tool_version(executable, env)
        if version is None:
            problems.append((dependency, f"'{executable} --version' printed no version"))
            continue
        if dependency.min_version and not at_least(version, dependency.min_version):
            problems.append((dependency, f"{dependency.name} {version} at {executable} is older than the floor {dependency.min_version}"))
            continue
        package, package_version = _owner(executable, env)
        result.found.append(Found(
            dependency, version, executable, package, package_version,
            origin="debian" if package else "local",
            file_sha256=hostlibs.file_digest(os.path.realpath(executable)),
            license=dependency.license,
            license_source="declared" if dependency.license else None,
        ))
        if dependency.name in PKG_CONFIG_TOOLS and result.pkg_config is None:
            result.pkg_config = executable
    return problems


def _probe_modules(modules: Sequence[HostDependency], result: HostCheck, env: dict[str, str]) -> list[tuple[HostDependency, str]]:
    problems: list[tuple[HostDependency, str]] = []
    for dependency in modules:
        assert result.pkg_config is not None
        found = _run([result.pkg_config, "--modversion", dependency.name], env)
        if found is None or found.returncode != 0:
            detail = (found.stderr.strip().splitlines() or [""])[0] if found is not None else "pkg-config did not run"
            problems.append((dependency, f"pkg-config finds no module {dependency.name} ({detail or 'not found'})"))
            continue
        version = found.stdout.strip()
        if not is_version_word(version):  # the .pc's Version: line, recorded and put into purls
            problems.append((dependency, f"{dependency.name}'s .pc states a Version that is not a version ({version[:80]!r})"))
            continue
        if dependency.min_version:
            ok = _run([result.pkg_config, f"--atleast-version={dependency.min_version}", dependency.name], env)
            if ok is None or ok.returncode != 0:
                problems.append((dependency, f"{dependency.name} is {version}, older than the floor {dependency.min_version}"))
                continue
        result.found.append(_inspect_module(dependency, version, result, env))
    return problems


def _inspect_module(dependency: HostDependency, version: str, result: HostCheck, env: dict[str, str]) -> Found:
    """Where a found module really comes from (Debian, vcpkg, or a local build), its files, release and licence."""
    assert result.pkg_config is not None
    pcdir = hostlibs.variable(result.pkg_config, dependency.name, "pcfiledir", env)
    pc_file = str(Path(pcdir) / f"{dependency.name}.pc") if pcdir else ""
    libdir = hostlibs.variable(result.pkg_config, dependency.name, "libdir", env)
    package, package_version = _owner(pc_file, env) if pc_file else (None, None)
    vcpkg = hostlibs.vcpkg_owner(pc_file) if pc_file and result.host.startswith("windows") and package is None else None
    libraries = tuple(hostlibs.library_files(result.pkg_config, dependency.name, env, libdir))
    release = hostlibs.upstream_release(dependency.name, hostlibs.variable(result.pkg_config, dependency.name, "includedir", env))
    reported = hostlibs.self_reported_license(dependency.name, list(libraries), env)
    if reported:
        license_, source = reported, f"self-reported: {dependency.name.removeprefix('lib')}_license()"
    else:
        license_, source = dependency.license, ("declared" if dependency.license else None)
    return Found(
        dependency, version, pc_file, package, package_version, libdir,
        origin="debian" if package else "vcpkg" if vcpkg else "local",
        vcpkg=vcpkg,
        file_sha256=hostlibs.pc_file_digest(pc_file, relocate=not package and not vcpkg) if pc_file else None,
        libraries=libraries,
        release=release,
        license=license_,
        license_source=source,
    )


def install_command(dependencies: Sequence[HostDependency], host: str) -> str | None:
    """The one command that installs `dependencies` on `host`, from their declared origins."""
    origins = sorted({d.origin_for(host) for d in dependencies if d.origin_for(host)})
    if not origins:
        return None
    if host.startswith("windows"):
        return "vcpkg install " + " ".join(f"{o}:x64-windows" for o in origins)
    return "apt-get install " + " ".join(origins)


def _missing(problems: list[tuple[HostDependency, str]], *, host: str, declaration_file: str, pkg_config_path: Sequence[str]) -> EnvironmentProblem:
    first = problems[0][0]
    names = ", ".join(f"{d.requirement()} ({d.kind})" for d, _ in problems)
    command = install_command([d for d, _ in problems], host)
    undeclared = [d.name for d, _ in problems if d.origin_for(host) is None]
    fix = f"run '{command}'" if command else "install them"
    if undeclared:
        fix += f" (no package is declared for {', '.join(undeclared)} on {host}: install it by hand)"
    if any(d.kind == "pkg-config" for d, _ in problems):
        searched = ", ".join(pkg_config_path) if pkg_config_path else "none: only pkg-config's built-in folders"
        fix += f"; a module installed under its own prefix is found with --pkg-config-path <prefix>/lib/pkgconfig (explicit folders now: {searched})"
    return EnvironmentProblem(
        f"the build host lacks {len(problems)} declared host dependenc{'y' if len(problems) == 1 else 'ies'}: {names}",
        file=declaration_file,
        field=first.declared_at,
        found="; ".join(reason for _, reason in problems),
        expected="every declared module and tool present at or above its floor",
        why="the build stops before any compile: CMake would fail (or, below a floor the source really needs, the compiler would) only after minutes",
        fix=fix,
    )


def _stem(soname: str) -> str:
    """libavformat.so.61 -> libavformat (the library, whatever its ABI number)."""
    return soname.split(".so", 1)[0].lower()


def soname_conflicts(check: HostCheck, named: Sequence[str]) -> list[tuple[Found, str, str]]:
    """(module, soname the host's library gives, the lane's name for that library) for each that disagree.

    The binaries will be linked against the DT_SONAME of the library each module's `Libs` names; a lane that
    names the same library (same stem) with another soname describes another ABI than the build will have.
    """
    by_stem: dict[str, list[str]] = {}
    for name in named:
        by_stem.setdefault(_stem(name), []).append(name)
    conflicts = []
    for item in check.found:
        for soname in item.sonames():
            listed = by_stem.get(_stem(soname), [])
            if listed and soname not in listed:
                conflicts.append((item, soname, listed[0]))
    return conflicts


def _described(entry: Mapping[str, Any]) -> str:
    origin = entry.get("origin")
    text = f"{entry.get('version')}"
    if entry.get("debian_package"):
        text += f" (Debian package {entry['debian_package']} {entry.get('debian_version')})"
    elif isinstance(entry.get("vcpkg"), Mapping):
        text += f" (vcpkg port {entry['vcpkg'].get('port')} {entry['vcpkg'].get('version')}#{entry['vcpkg'].get('port_version')})"
    elif origin:
        text += f" ({origin})"
    release = entry.get("release")
    if isinstance(release, Mapping) and release.get("version"):
        text += f", release {release.get('project')} {release['version']}"
    return text


def _install_hint(entry: Mapping[str, Any]) -> str:
    if entry.get("origin") == "debian" and entry.get("debian_package"):
        return f"apt-get install {entry['debian_package']}={entry.get('debian_version')}"
    if isinstance(entry.get("vcpkg"), Mapping):
        return f"vcpkg install {entry['vcpkg'].get('port')}:{entry['vcpkg'].get('triplet')} at version {entry['vcpkg'].get('version')}#{entry['vcpkg'].get('port_version')}"
    release = entry.get("release")
    what = f"{release.get('project')} {release.get('version')}" if isinstance(release, Mapping) else f"{entry.get('name')} {entry.get('version')}"
    return f"build {what} under a prefix and pass --pkg-config-path <prefix>/lib/pkgconfig"


def host_drift(
    recorded: Sequence[Mapping[str, Any]],
    check: HostCheck,
    missing: Sequence[tuple[HostDependency, str]],
    *,
    annotate: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None,
) -> list[dict[str, str]]:
    """Each way this host differs from the recorded build host: {dependency, recorded, found, install, differs_in}.

    Compared: presence, version, origin, the owning package and its version (Debian, vcpkg) and the upstream
    release, then, with `annotate` (the statement's annotation of a record) and the entry's recorded `annotations`,
    every other field the set's documents record: the `.pc` file's and each library's link interface's SHA-256
    (hostlibs.link_interface), a tool's file's SHA-256, the licence. Exactly what the payload's build-identity.json,
    the SBOMs and the statement will carry, so a host that passes gives the same documents. Not `min_version`:
    the declaration's floor, bound by the lane file's or the source's digest.
    """
    here = {(f.dependency.kind, f.dependency.name): f.to_json() for f in check.found}
    absent = {(d.kind, d.name): reason for d, reason in missing}
    out = []
    for entry in recorded:
        key = (str(entry.get("kind")), str(entry.get("name")))
        label = f"{key[1]} ({key[0]})"
        found = here.get(key)
        if found is None:
            out.append({"dependency": label, "recorded": _described(entry), "found": absent.get(key, "absent"), "install": _install_hint(entry)})
            continue
        keys = ["version", "origin", "debian_package", "debian_version", "vcpkg", "release"]
        differing = [k for k in keys if entry.get(k) is not None and _comparable(entry.get(k), k) != _comparable(found.get(k), k)]
        if differing:
            out.append({"dependency": label, "recorded": _described(entry), "found": _described(found), "install": _install_hint(entry), "differs_in": ", ".join(differing)})
            continue
        if annotate is None or not isinstance(entry.get("annotations"), Mapping):
            continue
        theirs, ours = entry["annotations"], annotate(found)
        fields = [k for k in sorted(theirs) if k != "min_version" and theirs.get(k) != ours.get(k)]
        if fields:
            out.append({
                "dependency": label,
                "recorded": "; ".join(f"{k} {theirs.get(k)}" for k in fields),
                "found": "; ".join(f"{k} {ours.get(k)}" for k in fields),
                "install": _install_hint(entry),
                "differs_in": ", ".join(fields),
            })
    return out


def _comparable(value: Any, key: str) -> Any:
    if key == "release" and isinstance(value, Mapping):
        return (value.get("project"), value.get("version"))
    if key == "vcpkg" and isinstance(value, Mapping):
        return (value.get("port"), value.get("version"), value.get("port_version"), value.get("triplet"))
    return value

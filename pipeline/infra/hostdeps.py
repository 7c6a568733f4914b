"""Check a build host's declared dependencies and record exactly what was found.

The build's environment is scrubbed (pipeline/build.py), so nothing here reads
the caller's `PKG_CONFIG_PATH` or `PATH`: the tools are looked up on the
build's own PATH and pkg-config runs with the search path the build passes to
CMake, so the preflight checks what the compile will see.  For each declared
dependency it records the version (`pkg-config --modversion`, or the first
dotted number of `<tool> --version`), the file it came from (the `.pc` file or
the executable) and, on a Debian/Ubuntu host, the package that owns that file
and its version (`dpkg-query -S`, `dpkg-query -W -f='${Version}'`).  Every
dependency that is missing or below its floor is reported in one error, with
the one command that installs them all.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import EnvironmentProblem, UsageError
from pipeline.formats.lanes import HostDependency

TIMEOUT = 30
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)+|[0-9]+")
PKG_CONFIG_TOOLS = ("pkg-config", "pkgconf")


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


@dataclass(frozen=True)
class Found:
    """One declared dependency as the host provides it."""

    dependency: HostDependency
    version: str
    path: str  # the .pc file or the executable
    debian_package: str | None = None
    debian_version: str | None = None
    libdir: str | None = None  # a pkg-config module's library folder

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.dependency.name,
            "kind": self.dependency.kind,
            "min_version": self.dependency.min_version,
            "version": self.version,
            "path": self.path,
            "debian_package": self.debian_package,
            "debian_version": self.debian_version,
            "vcpkg_port": self.dependency.vcpkg,
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

    def dependencies_json(self) -> list[dict[str, Any]]:
        return [f.to_json() for f in sorted(self.found, key=lambda f: (f.dependency.kind, f.dependency.name))]

    def environment_json(self) -> dict[str, Any]:
        return {
            "declared_by": self.declared_by,
            "host": self.host,
            "PATH": list(self.path),
            "PKG_CONFIG_PATH": list(self.pkg_config_path),
            "pkg_config": self.pkg_config,
            "pkg_config_default_path": self.pkg_config_default_path,
            "os_release": self.os_release,
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
    env = dict(base_env or {})
    env["PATH"] = os.pathsep.join(path)
    env.pop("PKG_CONFIG_LIBDIR", None)
    env.pop("PKG_CONFIG_SYSROOT_DIR", None)
    env.pop("PKG_CONFIG_PATH", None)
    if pkg_config_path:
        env["PKG_CONFIG_PATH"] = os.pathsep.join(pkg_config_path)
    result = HostCheck(declared_by=declared_by, host=host, path=tuple(path), pkg_config_path=tuple(pkg_config_path), os_release=os_release())
    applicable = [d for d in dependencies if d.applies_to(host)]
    problems: list[tuple[HostDependency, str]] = []

    for dependency in (d for d in applicable if d.kind == "tool"):
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
        result.found.append(Found(dependency, version, executable, package, package_version))
        if dependency.name in PKG_CONFIG_TOOLS and result.pkg_config is None:
            result.pkg_config = executable

    modules = [d for d in applicable if d.kind == "pkg-config"]
    if modules and result.pkg_config is None:
        problems += [(d, "not checked: the pkg-config tool is missing") for d in modules]
        modules = []
    if result.pkg_config is not None:
        default = _run([result.pkg_config, "--variable=pc_path", "pkg-config"], env)
        result.pkg_config_default_path = default.stdout.strip() if default is not None and default.returncode == 0 else None
    for dependency in modules:
        assert result.pkg_config is not None
        found = _run([result.pkg_config, "--modversion", dependency.name], env)
        if found is None or found.returncode != 0:
            detail = (found.stderr.strip().splitlines() or [""])[0] if found is not None else "pkg-config did not run"
            problems.append((dependency, f"pkg-config finds no module {dependency.name} ({detail or 'not found'})"))
            continue
        version = found.stdout.strip()
        if dependency.min_version:
            ok = _run([result.pkg_config, f"--atleast-version={dependency.min_version}", dependency.name], env)
            if ok is None or ok.returncode != 0:
                problems.append((dependency, f"{dependency.name} is {version}, older than the floor {dependency.min_version}"))
                continue
        pcdir = _run([result.pkg_config, "--variable=pcfiledir", dependency.name], env)
        pc_file = str(Path(pcdir.stdout.strip()) / f"{dependency.name}.pc") if pcdir is not None and pcdir.returncode == 0 and pcdir.stdout.strip() else ""
        libdir = _run([result.pkg_config, "--variable=libdir", dependency.name], env)
        package, package_version = _owner(pc_file, env) if pc_file else (None, None)
        result.found.append(
            Found(dependency, version, pc_file, package, package_version, libdir.stdout.strip() if libdir is not None and libdir.returncode == 0 else None)
        )

    if problems:
        raise _missing(problems, host=host, declaration_file=declaration_file, pkg_config_path=pkg_config_path)
    return result


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

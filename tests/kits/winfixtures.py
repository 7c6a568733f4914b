"""Real PE binaries for the Windows lanes' tests, cross-compiled with Debian's mingw-w64.

`compile_windows_prebuilt` builds, from the C sources in tests/fixtures/windows/,
small DLLs under the names the real runtime imports (cudart64_13.dll,
dstorage.dll + dstoragecore.dll, avformat/avcodec/avutil/swscale, libcurl.dll), each with
a version resource (windres VERSIONINFO, `VERSIONS`) as the real DLLs carry one, the
DirectStorage package's `LICENSE.txt` beside its DLLs (a test text),
and three executables that import them and embed the build identity string
`NINFER-BUILD-IDENTITY:v1 <key=value ...>` exactly once.  The result is a
folder that `python -m pipeline build --lane 4090 --prebuilt DIR` accepts.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from repokit import FIXTURES as TEST_FIXTURES
from repokit import missing_dependency

from pipeline.formats.identity import IDENTITY_KEYS

FIXTURES = TEST_FIXTURES / "windows"
MINGW = "x86_64-w64-mingw32-gcc"
# Reproducible PE files: no link timestamp, no symbols.
COMMON = ["-O2", "-s", "-Wl,--no-insert-timestamp"]

# DLL file name -> (source, import library stem, import libraries it links against)
DLLS = {
    "avutil-59.dll": ("avutil.c", "avutil", []),
    "avcodec-61.dll": ("avcodec.c", "avcodec", ["avutil"]),
    "avformat-61.dll": ("avformat.c", "avformat", ["avcodec", "avutil"]),
    "swscale-8.dll": ("swscale.c", "swscale", ["avutil"]),
    "cudart64_13.dll": ("cudart.c", "cudart", []),
    "dstorage.dll": ("dstorage.c", "dstorage", []),
    "dstoragecore.dll": ("dstoragecore.c", "dstoragecore", []),
    "libcurl.dll": ("curl.c", "curl", ["ws2_32"]),
}
EXE_LIBS = ["cudart", "dstorage", "avformat", "curl"]
# What the Windows job puts beside the DirectStorage DLLs: the package's LICENSE.txt (a test text here).
DIRECTSTORAGE_LICENCE = FIXTURES / "directstorage-LICENSE.txt"
WINDRES = "x86_64-w64-mingw32-windres"
# Each DLL's version resource (VS_VERSIONINFO), as its maker writes one: (ProductName, ProductVersion,
# FileVersion, CompanyName).  The FFmpeg and curl versions are the pinned vcpkg baseline's
# (packaging/windows/vcpkg.toml: ffmpeg 7.1.2, curl 8.17.0); the SBOMs must read them from these bytes.
VERSIONS = {
    "avutil-59.dll": ("FFmpeg", "7.1.2", "59.39.100", "FFmpeg Project"),
    "avcodec-61.dll": ("FFmpeg", "7.1.2", "61.19.101", "FFmpeg Project"),
    "avformat-61.dll": ("FFmpeg", "7.1.2", "61.7.100", "FFmpeg Project"),
    "swscale-8.dll": ("FFmpeg", "7.1.2", "8.3.100", "FFmpeg Project"),
    "cudart64_13.dll": ("NVIDIA CUDA 13.3.73 Runtime", "13.3.73", "6.14.11.13030", "NVIDIA Corporation"),
    "dstorage.dll": ("Microsoft DirectStorage", "1.3.0", "1.3.0.2501", "Microsoft Corporation"),
    "dstoragecore.dll": ("Microsoft DirectStorage", "1.3.0", "1.3.0.2501", "Microsoft Corporation"),
    "libcurl.dll": ("The curl library", "8.17.0", "8.17.0", "The curl library, https://curl.se/"),
}


def version_resource(product: str, product_version: str, file_version: str, company: str) -> str:
    """A VERSIONINFO resource script for windres (the binary numbers padded to four parts)."""
    def numbers(text: str) -> str:
        parts = [p for p in text.split(".") if p.isdigit()][:4]
        return ",".join(parts + ["0"] * (4 - len(parts)))

    return f"""1 VERSIONINFO
FILEVERSION {numbers(file_version)}
PRODUCTVERSION {numbers(product_version)}
BEGIN
  BLOCK "StringFileInfo"
  BEGIN
    BLOCK "040904b0"
    BEGIN
      VALUE "CompanyName", "{company}"
      VALUE "FileVersion", "{file_version}"
      VALUE "ProductName", "{product}"
      VALUE "ProductVersion", "{product_version}"
    END
  END
  BLOCK "VarFileInfo"
  BEGIN
    VALUE "Translation", 0x409, 1200
  END
END
"""


def require_mingw() -> str:
    found = shutil.which(MINGW)
    if not found:
        missing_dependency(f"{MINGW} is not installed (Debian: apt-get install gcc-mingw-w64-x86-64; .ci/run installs it)")
    return found


def native_identity(lane, commit: str, beta: int | None = None, **changes: str) -> dict[str, str]:
    """The identity the build stage expects from a native lane's binaries built from `commit`."""
    values = {
        "upstream_base_sha": lane.upstream_base,
        "patch_stack_sha": commit,
        "build_profile": lane.build_profile(beta),
        "build_type": "Release",
        "cxx_compiler": "MSVC-19.44.35217",
        "cuda_compiler": "NVIDIA-13.3.73",
        "cuda_toolkit": "13.3.73",
        "cuda_architecture": lane.cuda_architecture,
        "source_dirty": "false",
    }
    values.update(changes)
    return values


def _cc(args: list[str], cwd: Path) -> None:
    result = subprocess.run([MINGW, *args], cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        raise AssertionError(f"{MINGW} {' '.join(args)} failed:\n{result.stderr}")


def compile_versioned_dll(out: Path, name: str) -> Path:
    """One small DLL named `name` with that DLL's version resource (`VERSIONS`) and no imports: a stand-in
    for a file of an installed vcpkg tree, where only its name and version resource matter."""
    require_mingw()
    work = out.parent / f".{name}-work"
    work.mkdir(parents=True, exist_ok=True)
    (work / "version.rc").write_text(version_resource(*VERSIONS[name]))
    result = subprocess.run([WINDRES, "version.rc", "-O", "coff", "-o", "version.res.o"], cwd=work, capture_output=True, text=True)
    if result.returncode != 0:
        raise AssertionError(f"{WINDRES} version.rc failed:\n{result.stderr}")
    out.mkdir(parents=True, exist_ok=True)
    _cc([*COMMON, "-shared", "-o", str(out / name), str(FIXTURES / "avutil.c"), "version.res.o"], work)
    shutil.rmtree(work)
    return out / name


def compile_windows_prebuilt(
    out: Path,
    identity: dict[str, str],
    *,
    binaries: tuple[str, ...] = ("ninfer", "ninfer-serve", "ninfer_bench"),
    dlls: tuple[str, ...] | None = None,
    app_source: Path | None = None,
    import_libs: Path | None = None,
) -> Path:
    """The mingw-built Windows binaries and DLLs; `app_source` replaces the executables' one C file.

    The DLLs' import libraries are kept in `<out>-import-libs/`; a later call that ships no DLL
    (`dlls=()`) may link against those (`import_libs=`) instead of compiling the DLLs again."""
    require_mingw()
    work = out.parent / f".{out.name}-work"
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    if import_libs is not None:
        assert dlls == (), "import_libs links executables only: the DLLs themselves are not compiled"
        for stem in {stem for _source, stem, _libs in DLLS.values()}:
            shutil.copyfile(import_libs / f"lib{stem}.dll.a", work / f"lib{stem}.dll.a")
    else:
        for dll, (source, stem, libs) in DLLS.items():
            (work / f"{stem}.rc").write_text(version_resource(*VERSIONS[dll]))
            result = subprocess.run([WINDRES, f"{stem}.rc", "-O", "coff", "-o", f"{stem}.res.o"], cwd=work, capture_output=True, text=True)
            if result.returncode != 0:
                raise AssertionError(f"{WINDRES} {stem}.rc failed:\n{result.stderr}")
            _cc([*COMMON, "-shared", "-o", dll, str(FIXTURES / source), f"{stem}.res.o", f"-Wl,--out-implib,lib{stem}.dll.a", "-L.", *(f"-l{lib}" for lib in libs)], work)
        kept = out.parent / f"{out.name}-import-libs"
        kept.mkdir(exist_ok=True)
        for library in work.glob("lib*.dll.a"):
            shutil.copyfile(library, kept / library.name)
    text = " ".join(f"{key}={identity[key]}" for key in IDENTITY_KEYS)
    (work / "identity.h").write_text(f'#define NINFER_IDENTITY_RECORD "NINFER-BUILD-IDENTITY:v1 {text}"\n')
    for binary in binaries:
        _cc([*COMMON, f'-DNINFER_BINARY="{binary}"', "-I.", "-o", f"{binary}.exe", str(app_source or FIXTURES / "ninfer_app.c"), "-L.", *(f"-l{lib}" for lib in EXE_LIBS)], work)
        shutil.copyfile(work / f"{binary}.exe", out / f"{binary}.exe")
    shipped = dlls if dlls is not None else tuple(DLLS)
    for dll in shipped:
        shutil.copyfile(work / dll, out / dll)
    if "dstorage.dll" in shipped:  # the licence file the DirectStorage NuGet package ships, beside its DLLs
        shutil.copyfile(DIRECTSTORAGE_LICENCE, out / "LICENSE.txt")
    shutil.rmtree(work)
    return out


# -- a whole native workspace, made once per test session ---------------------------

_CACHE: dict[str, object] = {}


class NativeWorkspace:
    """The sample in its own repository, a lanes folder whose 4090 lane pins that commit
    (with a release spec that binds it), its cut ledger (`cuts/` beside `lanes/`, as
    runtime/cuts/ is beside runtime/lanes/) where `cut` recorded beta.2 of that commit,
    and mingw-built prebuilt binaries."""

    def __init__(self, root: Path, short: str = "4090") -> None:
        import json

        from repokit import SAMPLE, make_repo

        from pipeline.formats.lanes import DEFAULT_LANES_DIR, REPO_ROOT, load_lane
        from pipeline.util.jsonio import canonical_bytes

        self.root = root
        self.short = short
        lane_id = f"rtx{short}-windows-native"
        self.repo = root / "ninfer"
        self.commit = make_repo(self.repo, SAMPLE)
        self.lanes_dir = root / "lanes"
        self.contract = root / "contract"
        self.lanes_dir.mkdir()
        self.contract.mkdir()
        for path in DEFAULT_LANES_DIR.glob("*.toml"):
            text = path.read_text()
            if path.stem == lane_id:
                frozen = "7a25cd72f490183e4113f1e84e68e36d653ddd28"
                assert frozen in text
                text = text.replace(frozen, self.commit)
                spec = json.loads((REPO_ROOT / f"packaging/windows/lanes/rtx{short}/release-spec.json").read_text())
                spec["source"]["commit"] = self.commit
                (self.contract / "release-spec.json").write_bytes(canonical_bytes(spec))
                shutil.copyfile(REPO_ROOT / f"packaging/windows/lanes/rtx{short}/server-config.json", self.contract / "server-config.json")
                text = text.replace(f"packaging/windows/lanes/rtx{short}/server-config.json", str(self.contract / "server-config.json"))
                text = text.replace(f"packaging/windows/lanes/rtx{short}/release-spec.json", str(self.contract / "release-spec.json"))
            if path.stem == "rtx5090-container":
                import imagekit  # the release tests build the container lane's image on a test base pinned by digest

                text = imagekit.registry_lane_text(text)
            (self.lanes_dir / path.name).write_text(text)
        self.cuts_dir = root / "cuts"
        write_sample_ledgers(self.cuts_dir, self.lanes_dir, self.repo, self.commit, root / "cut-dist", short)
        self.lane = load_lane(self.lanes_dir / f"{lane_id}.toml")
        assert self.lane.beta == 2
        self.prebuilt = compile_windows_prebuilt(root / "prebuilt", native_identity(self.lane, self.commit))
        self.import_libs = root / "prebuilt-import-libs"  # what compile_windows_prebuilt kept: link another executable cheaply

    def build(self, dist: Path, prebuilt: Path | None = None):
        from pipeline.stages.build import build_lane

        return build_lane(self.short, dist=dist, source=str(self.repo), prebuilt=prebuilt or self.prebuilt, lanes_dir=self.lanes_dir)

    def package(self, dist: Path, **kwargs):
        from pipeline.stages.package import package_lane

        return package_lane(self.short, dist=dist, lanes_dir=self.lanes_dir, **kwargs)


def write_sample_ledgers(cuts_dir: Path, lanes_dir: Path, repo: Path, commit: str, dist: Path, short: str = "4090") -> None:
    """The real ledgers of the other lanes; for this native lane, beta.1 used before (as in the real
    lane, whose beta.1 was superseded) and beta.2 recorded by the real `cut` stage from `commit`."""
    from pipeline.formats.cut_ledger import External, Ledger, write_ledger
    from pipeline.formats.lanes import REPO_ROOT
    from pipeline.stages.cut import cut_lane

    lane_id = f"rtx{short}-windows-native"
    cuts_dir.mkdir(parents=True, exist_ok=True)
    for path in (REPO_ROOT / "runtime" / "cuts").glob("*.json"):
        if path.stem != lane_id:
            shutil.copyfile(path, cuts_dir / path.name)
    tag = f"v0.7.0-qwen38-{short}-beta.1"
    write_ledger(cuts_dir, Ledger(lane_id, (), (External("0.7.0", 1, tag, "history: the sample repository stands in for a runtime whose beta.1 was superseded"),)))
    cut_lane(short, source=f"{repo}@{commit}", dist=dist, lanes_dir=lanes_dir, use_github=False)


def copy_lanes(workspace: NativeWorkspace, target: Path) -> Path:
    """A copy of the workspace's lanes folder with its cut ledgers beside it; returns the lanes folder."""
    target.mkdir(parents=True, exist_ok=True)
    shutil.copytree(workspace.lanes_dir, target / "lanes")
    shutil.copytree(workspace.cuts_dir, target / "cuts")
    return target / "lanes"


def native_workspace(tmp_path_factory, short: str = "4090") -> NativeWorkspace:
    key = f"workspace-{short}"
    if key not in _CACHE:
        require_mingw()
        _CACHE[key] = NativeWorkspace(tmp_path_factory.mktemp(f"native-{short}"), short)
    return _CACHE[key]  # type: ignore[return-value]


def packaged_native_set(tmp_path_factory, short: str = "4090") -> tuple[NativeWorkspace, Path]:
    """(workspace, dist) with the 4090 (or 3090) lane built from the mingw binaries and packaged once."""
    key = f"dist-{short}"
    if key not in _CACHE:
        workspace = native_workspace(tmp_path_factory, short)
        dist = tmp_path_factory.mktemp(f"native-dist-{short}") / "dist"
        workspace.build(dist)
        workspace.package(dist)
        _CACHE[key] = dist
    return native_workspace(tmp_path_factory, short), _CACHE[key]  # type: ignore[return-value]

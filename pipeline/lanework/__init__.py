"""Lane-aware and format-aware work shared by the stages: toolchains, source export, shipped binaries, build-host
dependencies and libraries, Debian packages made into an image layer.  Above `formats/` and `infra/`, below the stages."""

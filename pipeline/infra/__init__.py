"""Plumbing the stages share: archives, OCI, registry and HTTP clients, git, toolchains, binaries, Sigstore."""

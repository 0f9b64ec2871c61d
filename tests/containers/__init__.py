"""The container tier: Ray from an image, run by Debian's Charliecloud and podman; see docs/containers.md."""

"""A user's YAML file, read so every problem names its key path and line: `read` composes the
node tree and expands `${env:...}`; `model` checks it with a pydantic model (the policy, the
dialects, the sidecar's config). docs/architecture.md places them in the layers."""

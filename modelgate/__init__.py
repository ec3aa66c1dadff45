"""modelgate, an LLM gateway: the model API, the cabinet and the ops CLI in one import namespace.

One folder per layer, each at its import path (`modelgate/config/`, `storage/`, `infra/`, `domain/`, `proxy/`,
`plugins/`, `cabinet/`, bottom first; docs/architecture.md draws them); the modules directly in this package
compose them.
"""

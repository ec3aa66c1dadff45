"""modelgate, an LLM gateway: the model API, the cabinet and the ops CLI in one import namespace.

The repository keeps one folder per layer at its top (`proxy/`, `plugins/`, `cabinet/`, `config/`,
`billing/`); the package maps them under this one (`modelgate.proxy`, …; see `pyproject.toml`), so an
installation adds no other top-level name to `site-packages`.
"""

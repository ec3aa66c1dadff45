"""State the gateway keeps beside the database: object bindings, the host channel between workers, shared-
state helpers.
"""

"""Logs, Prometheus metrics and OpenTelemetry tracing."""

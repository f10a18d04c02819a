"""OpenTelemetry's side of hiredlock.otel: the observer that turns Events into metrics and spans."""

"""Test support for docket-postgres (throwaway servers on 127.0.0.1)."""

"""Test support for docket-redis (throwaway servers on 127.0.0.1)."""

"""The merchant API (docs/api.md): balances, event status and history out; users, deposit
addresses and withdrawal requests in; authenticated by API keys. docs/api.md."""

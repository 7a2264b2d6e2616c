//! A fake Kubernetes API server (placeholder; see issue 4).

//! The lab harness (see issue 5).

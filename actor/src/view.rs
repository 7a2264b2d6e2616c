//! This node's view of the state (to be written).

//! Rendering configs from the view (to be written).

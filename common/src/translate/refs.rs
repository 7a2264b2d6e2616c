//! References between objects, resolved one way for every kind that makes them.

//! Adversarial review: object files and config documents.

use k8slb_common::objects::Objects;

#[test]
fn a_list_with_non_object_items_is_not_a_panic() {
    // Bug: `item["kind"] = ...` panics when an item is not an object.
    let mut o = Objects::default();
    o.add_text("kind: List\nitems: [5, \"x\", [1], true]\n")
        .unwrap();
    o.add_text("{\"kind\":\"ServiceList\",\"items\":[7]}")
        .unwrap();
    assert!(o.services.is_empty());
}

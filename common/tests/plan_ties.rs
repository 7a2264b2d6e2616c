//! creationTimestamp has whole seconds, so Services created in the same second tie. The
//! plan breaks the tie by namespace, then name, whatever order the Services come in: the
//! same cluster gives the same allocation after every restart.

mod support;

use support::*;

#[test]
fn services_created_in_the_same_second_are_ordered_by_namespace_then_name() {
    let c = cfg(r#"{"pools":{"default":{"network":"10.0.0.0/24","range":"10.0.0.10-10.0.0.12"}}}"#);
    // Three addresses, four Services of the same second; an older one comes first.
    let older = svc("zz", "old").port(80).created(1).build();
    let same = |ns: &str, name: &str| svc(ns, name).port(80).created(7).build();
    let orders = [
        vec![
            same("b", "a"),
            same("a", "z"),
            same("a", "b"),
            older.clone(),
            same("b", "b"),
        ],
        vec![
            same("b", "b"),
            older.clone(),
            same("a", "b"),
            same("a", "z"),
            same("b", "a"),
        ],
    ];
    for services in orders {
        let s = run(&c, &objs(services, nodes(1), vec![]), None);
        assert_eq!(ips(&s, "zz/old"), ["10.0.0.10"], "the older Service first");
        assert_eq!(ips(&s, "a/b"), ["10.0.0.11"]);
        assert_eq!(ips(&s, "a/z"), ["10.0.0.12"]);
        assert!(ips(&s, "b/a").is_empty() && ips(&s, "b/b").is_empty());
        assert_eq!(problems_of(&s, "b/a")[0].0, "PoolExhausted");
    }
}

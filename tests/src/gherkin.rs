//! The subset of Gherkin the Ingress conformance features use (kubernetes-sigs/
//! ingress-controller-conformance `features/*.feature`): a `Feature`, an optional
//! `Background`, `Scenario`s and `Scenario Outline`s with `Examples`, steps
//! (`Given`/`When`/`Then`/`And`/`But`) with a doc string (`"""`) or a data table (`|`).
//! Tags, comments and descriptions are skipped. An outline becomes one scenario per
//! example row, `<column>` replaced in step texts, doc strings and tables; one without
//! Examples is one scenario. The steps are
//! data for [`crate::ingress_conformance`]'s interpreter.

use anyhow::{bail, Result};

/// One step: its text without the keyword, its doc string, its table rows.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Step {
    pub text: String,
    pub doc: Option<String>,
    pub table: Vec<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scenario {
    /// The scenario's name; an outline's row adds ` [<values>]`.
    pub name: String,
    pub steps: Vec<Step>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Feature {
    pub name: String,
    pub background: Vec<Step>,
    pub scenarios: Vec<Scenario>,
}

const STEP_KEYWORDS: &[&str] = &["Given ", "When ", "Then ", "And ", "But "];

enum Section {
    None,
    Background,
    Scenario { outline: bool },
    Examples,
}

fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').map(|c| c.trim().to_string()).collect()
}

fn substitute(text: &str, header: &[String], row: &[String]) -> String {
    let mut out = text.to_string();
    for (h, v) in header.iter().zip(row) {
        out = out.replace(&format!("<{h}>"), v);
    }
    out
}

/// Parses one `.feature` file.
pub fn parse(text: &str) -> Result<Feature> {
    let mut name = None;
    let mut background = Vec::new();
    let mut scenarios: Vec<(Scenario, bool, Vec<Vec<String>>)> = Vec::new();
    let mut section = Section::None;
    let mut lines = text.lines().enumerate();
    while let Some((n, raw)) = lines.next() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('@') {
            continue;
        }
        if let Some(rest) = line.strip_prefix("Feature:") {
            name = Some(rest.trim().to_string());
            continue;
        }
        if line.starts_with("Background:") {
            section = Section::Background;
            continue;
        }
        if let Some(rest) = line.strip_prefix("Scenario Outline:") {
            scenarios.push((
                Scenario {
                    name: rest.trim().into(),
                    steps: Vec::new(),
                },
                true,
                Vec::new(),
            ));
            section = Section::Scenario { outline: true };
            continue;
        }
        if let Some(rest) = line.strip_prefix("Scenario:") {
            scenarios.push((
                Scenario {
                    name: rest.trim().into(),
                    steps: Vec::new(),
                },
                false,
                Vec::new(),
            ));
            section = Section::Scenario { outline: false };
            continue;
        }
        if line.starts_with("Examples:") {
            if !matches!(section, Section::Scenario { outline: true }) {
                bail!("line {}: Examples outside a Scenario Outline", n + 1);
            }
            section = Section::Examples;
            continue;
        }
        let steps = match section {
            Section::Background => Some(&mut background),
            Section::Scenario { .. } => scenarios.last_mut().map(|s| &mut s.0.steps),
            _ => None,
        };
        if line.starts_with("\"\"\"") {
            let indent = raw.len() - raw.trim_start().len();
            let mut doc = Vec::new();
            loop {
                let Some((_, l)) = lines.next() else {
                    bail!("line {}: unterminated doc string", n + 1)
                };
                if l.trim() == "\"\"\"" {
                    break;
                }
                let cut = l.len() - l.trim_start().len();
                doc.push(l[cut.min(indent)..].to_string());
            }
            let Some(step) = steps.and_then(|s| s.last_mut()) else {
                bail!("line {}: a doc string without a step", n + 1)
            };
            step.doc = Some(doc.join("\n") + "\n");
            continue;
        }
        if line.starts_with('|') {
            if let Section::Examples = section {
                if let Some(s) = scenarios.last_mut() {
                    s.2.push(cells(line));
                }
                continue;
            }
            let Some(step) = steps.and_then(|s| s.last_mut()) else {
                bail!("line {}: a table without a step", n + 1)
            };
            step.table.push(cells(line));
            continue;
        }
        if let Some(k) = STEP_KEYWORDS.iter().find(|k| line.starts_with(**k)) {
            let Some(steps) = steps else {
                bail!("line {}: a step outside a Background or Scenario", n + 1)
            };
            steps.push(Step {
                text: line[k.len()..].trim().to_string(),
                ..Step::default()
            });
            continue;
        }
        // A description line.
    }
    let mut out = Vec::new();
    for (s, outline, examples) in scenarios {
        if !outline {
            out.push(s);
            continue;
        }
        // An outline without Examples (load_balancing's) runs once, as written.
        let Some((header, rows)) = examples.split_first() else {
            out.push(s);
            continue;
        };
        for row in rows {
            let sub = |t: &str| substitute(t, header, row);
            out.push(Scenario {
                name: format!("{} [{}]", sub(&s.name), row.join(", ")),
                steps: s
                    .steps
                    .iter()
                    .map(|st| Step {
                        text: sub(&st.text),
                        doc: st.doc.as_deref().map(sub),
                        table: st
                            .table
                            .iter()
                            .map(|r| r.iter().map(|c| sub(c)).collect())
                            .collect(),
                    })
                    .collect(),
            });
        }
    }
    Ok(Feature {
        name: name.unwrap_or_default(),
        background,
        scenarios: out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUTLINE: &str = r#"@tag
Feature: Demo
  A description.

  Background:
    Given an Ingress resource named "x" with this spec:
    """
    defaultBackend:
      service:
        name: echo
    """

  Scenario Outline: Sends <method>
    When I send a "<method>" request to http://"<host>"/"<path>"
    And the response headers must contain <key> with matching <value>
      | key    | value |
      | Server | *     |

    Examples:
      | method | host | path |
      | GET    | a    |      |
      | PUT    |      | r    |

  Scenario: Plain
    (a description)
    Then the response status-code must be 404
"#;

    #[test]
    fn an_outline_becomes_one_scenario_per_example_row_with_its_values() {
        let f = parse(OUTLINE).unwrap();
        assert_eq!(f.name, "Demo");
        assert_eq!(f.background.len(), 1);
        assert_eq!(
            f.background[0].doc.as_deref(),
            Some("defaultBackend:\n  service:\n    name: echo\n")
        );
        let names: Vec<&str> = f.scenarios.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            ["Sends GET [GET, a, ]", "Sends PUT [PUT, , r]", "Plain"]
        );
        assert_eq!(
            f.scenarios[1].steps[0].text,
            r#"I send a "PUT" request to http://""/"r""#
        );
        assert_eq!(
            f.scenarios[0].steps[1].table,
            [vec!["key", "value"], vec!["Server", "*"]]
        );
        assert_eq!(f.scenarios[2].steps.len(), 1);
    }

    #[test]
    fn a_doc_string_without_its_end_is_an_error() {
        let broken = "Feature: x\n  Scenario: y\n    Given z\n    \"\"\"\n    a: 1\n";
        assert!(parse(broken).is_err());
    }
}

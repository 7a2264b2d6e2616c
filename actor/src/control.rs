//! The control loop's decisions as a pure step: [`Control::step`] takes one [`Input`]
//! (a tick, what the state source gave, how an apply, a supervision step or an
//! observation went, a shutdown) and the time, and returns the [`Action`]s to carry out,
//! in order. No clock, no I/O, no logging: [`crate::run::control_loop`] is the driver
//! that polls the source, applies, supervises, touches addresses and files, writes the
//! log lines ([`Note`]) and feeds the results back.
//!
//! One iteration of the loop (every 50 ms) is a chain of steps; an action that needs an
//! answer is the last of its batch, and the answer is the next input:
//!
//! ```text
//! Tick ──▶ [PollSource] ──▶ Polled ──▶ [RemoveStaleVips] [Apply] ──▶ Applied ──▶ [Supervise]
//!      ──▶ Supervised ──▶ [RemoveVipsOfDeadKeepalived] [SetReadiness] [SaveLastState]
//!                         [ObserveVips] ──▶ Observed
//! ```
//!
//! A link whose action is not due is skipped: no `PollSource` when polling is not due
//! (the step goes on as after `Polled(Unchanged)`), no `Apply` when nothing is due.
//!
//! What it decides:
//! - a new state is debounced ([`Debouncer`]) and applied once stale VIPs are gone
//!   (the first state, or `last-state.json` when the source is unavailable at start);
//! - a failed apply is retried after [`Timing::retry_failed_after`], a deferred one
//!   (reload rate limit) at its instant, and a VIP held out by the hand-over hold-down
//!   joins when it ends (`handover_until` of [`ApplyOutcome::Done`]);
//! - the applied state is saved at once the first time, later debounced by
//!   [`Timing::save`] ([`LAST_STATE_QUIET`] after the last change, at most
//!   [`LAST_STATE_MAX`] after the first unsaved one);
//! - keepalived exiting on its own removes the VIPs of every known state at once;
//! - a state planned for another provider than this actor's is refused: logged once,
//!   counted, and `/readyz` says why, while what was applied last keeps running;
//! - at shutdown: the VIPs this node holds are handed over to peers (kept on `lo` until
//!   a peer is master, [`crate::leave`]), then keepalived stops, then our VIPs go, then
//!   the proxy.

use k8slb_common::debounce::Debouncer;
use k8slb_common::state::{Provider, State};
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long after the last applied change the state is saved as last-state.json (the
/// first applied state is saved at once).
pub const LAST_STATE_QUIET: Duration = Duration::from_secs(1);
/// ... and at most this long after the first unsaved change (changes that never stop).
pub const LAST_STATE_MAX: Duration = Duration::from_secs(10);

/// The control loop's periods and delays.
#[derive(Debug, Clone)]
pub struct Timing {
    /// How often the state source is polled.
    pub poll_every: Duration,
    /// How often the VIPs this node holds are observed (metric, log line on change).
    pub observe_every: Duration,
    /// A failed apply is tried again after this long (sooner when a daemon restarts).
    pub retry_failed_after: Duration,
    /// The applied state is saved `quiet` after the last applied change, and at most
    /// `max` after the first unsaved one (changes that never stop).
    pub save: Debouncer,
    /// Bursts of new states are joined by this debouncer.
    pub debounce: Debouncer,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            poll_every: Duration::from_millis(50),
            observe_every: Duration::from_secs(2),
            retry_failed_after: Duration::from_secs(10),
            save: Debouncer::new(LAST_STATE_QUIET, LAST_STATE_MAX),
            debounce: Debouncer::default(),
        }
    }
}

/// One input of the step.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// An iteration of the loop begins.
    Tick,
    /// The answer to [`Action::PollSource`].
    Polled(Poll),
    /// The answer to [`Action::Apply`].
    Applied(ApplyOutcome),
    /// The answer to [`Action::Supervise`].
    Supervised(Supervised),
    /// The answer to [`Action::ObserveVips`]: the VIPs of the state this node holds.
    /// (Not given when the addresses could not be listed.)
    Observed(BTreeSet<IpAddr>),
    /// SIGTERM or SIGINT.
    Shutdown,
}

/// What the state source gave.
#[derive(Debug, Clone, PartialEq)]
pub enum Poll {
    Unchanged,
    /// A state document, parsed.
    State(Arc<State>),
    /// A document that cannot be used, and why. With its text (the file source), the
    /// same text is reported once; without (the ConfigMap source, which reports each
    /// refused document once itself), every time.
    Refused {
        text: Option<String>,
        error: String,
    },
    /// Nothing to give (yet); at start, `last-state.json` is used instead.
    Unavailable(String),
}

/// How an apply went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplyOutcome {
    /// The state runs. `changed`: a daemon was reloaded, started or updated.
    /// `handover_until`: a VIP is held out of keepalived until then (apply again then).
    Done {
        changed: bool,
        handover_until: Option<Instant>,
    },
    /// A reload would break the rate limit: apply again at this instant.
    Deferred(Instant),
    /// Nothing that failed was installed; the running configs stay.
    Failed(String),
}

/// After a supervision step.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Supervised {
    /// keepalived ran before the step and was reaped in it: it exited on its own.
    pub keepalived_exited: bool,
    /// The daemons may not run the applied view (a restart from an older file, or a
    /// daemon back after a failed apply): apply again.
    pub wants_apply: bool,
    /// Why the daemons do not run the applied config, if they do not.
    pub not_ready: Option<String>,
}

/// One thing for the driver to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Poll the state source; answer with [`Input::Polled`].
    PollSource,
    /// Remove the VIPs of these states this node holds (not its own addresses): the
    /// start-up cleanup, before keepalived ever runs.
    RemoveStaleVips(Vec<Arc<State>>),
    /// Apply `state`; `known_vips` (of the last applied and the last saved state) never
    /// decide an interface or a node address. Answer with [`Input::Applied`].
    Apply {
        state: Arc<State>,
        known_vips: BTreeSet<IpAddr>,
    },
    /// Supervise the daemons; answer with [`Input::Supervised`].
    Supervise,
    /// keepalived exited on its own: remove the VIPs of these states from this node now,
    /// before it is restarted, and say which.
    RemoveVipsOfDeadKeepalived(Vec<Arc<State>>),
    /// `/readyz`: `None` ready, `Some(why)` not.
    SetReadiness(Option<String>),
    /// The error `/readyz` shows (`None` clears it).
    SetError(Option<String>),
    /// Count a refused state document (`state_refused_total`).
    CountRefused,
    /// `provider_mismatch{planned}`: 1 for the provider of a refused state, or none.
    SetProviderMismatch(Option<Provider>),
    /// Write this state as `last-state.json`.
    SaveLastState(Arc<State>),
    /// List the VIPs of this state this node holds (metric `vips_held`); answer with
    /// [`Input::Observed`].
    ObserveVips(Arc<State>),
    /// A log line.
    Log(Note),
    /// Shutdown: hand the VIPs of this state that this node holds over to peers
    /// ([`crate::leave`]): keep answering for them on `lo`, stop keepalived (priority-0
    /// adverts) and wait (bounded) until a peer's advert says it is master. With no
    /// peer, nothing is done. keepalived is stopped either way by [`Action::StopKeepalived`].
    HandOver(Arc<State>),
    /// Shutdown: stop keepalived (priority-0 adverts: a backup takes over at once).
    StopKeepalived,
    /// Shutdown: remove the VIPs of these states, then clear `vips_held`.
    RemoveVips(Vec<Arc<State>>),
    /// Shutdown: stop the proxy.
    StopProxy,
    /// The loop ends.
    Exit,
}

/// A log line the step asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    NewState {
        vips: usize,
        services: usize,
    },
    /// A state document refused (unreadable); the previous state stays.
    StateRefused {
        error: String,
    },
    /// The source is unavailable at start: `last-state.json` is used.
    StartingFromLastSaved {
        error: String,
    },
    /// A state planned for another provider: refused (logged when it starts, not for
    /// every such state).
    ProviderMismatch {
        planned: Provider,
        actor: Provider,
        /// Whether a state was applied before (it keeps running).
        applied: bool,
    },
    /// A state for this actor's provider arrived after refused ones.
    ProviderMatchesAgain {
        provider: Provider,
    },
    /// The VIPs this node holds changed.
    HeldChanged {
        held: BTreeSet<IpAddr>,
        gained: BTreeSet<IpAddr>,
        lost: BTreeSet<IpAddr>,
    },
    ShuttingDown,
    Stopped,
}

/// The provider `state` was planned for, if it records one that is not `actor`'s. A
/// state without the field (published by a watcher older than it) is not refused.
pub fn provider_mismatch(state: &State, actor: Provider) -> Option<Provider> {
    state.provider.filter(|p| *p != actor)
}

/// Why a state planned for `planned` is not rendered by an actor of `actor`.
pub fn mismatch_reason(planned: Provider, actor: Provider) -> String {
    format!(
        "the state was planned for provider {planned}, but this actor runs {actor} \
         (--proxy / PROXY must match the watcher's)"
    )
}

/// [`mismatch_reason`], and what runs meanwhile (`/readyz`, the log).
pub fn refusal(planned: Provider, actor: Provider, applied: bool) -> String {
    format!(
        "{}; it is not rendered, {}",
        mismatch_reason(planned, actor),
        if applied {
            "the last applied state keeps running"
        } else {
            "nothing was applied yet"
        }
    )
}

/// The control loop's memory between steps.
#[derive(Debug)]
pub struct Control {
    provider: Provider,
    timing: Timing,
    /// `last-state.json` as read at start.
    last_saved: Option<Arc<State>>,
    /// The newest good state, and the last one applied as a whole (what runs).
    current: Option<Arc<State>>,
    applied: Option<Arc<State>>,
    /// The state of the [`Action::Apply`] whose answer is awaited.
    applying: Option<Arc<State>>,
    /// Stale VIPs removed (once, before keepalived first runs).
    cleaned: bool,
    debouncer: Debouncer,
    retry_at: Option<Instant>,
    /// `None`: at the next tick.
    next_poll: Option<Instant>,
    next_observe: Option<Instant>,
    /// The text of the last unreadable document (each is reported once).
    refused_text: Option<String>,
    /// The provider of the refused state(s) planned for another provider.
    mismatch: Option<Provider>,
    held: BTreeSet<IpAddr>,
    /// When to save `applied` (pending: an applied change is not saved yet).
    saver: Debouncer,
}

impl Control {
    /// The step of an actor serving `provider`, with `last-state.json` as read at start.
    pub fn new(provider: Provider, timing: Timing, last_saved: Option<State>) -> Self {
        Control {
            provider,
            debouncer: timing.debounce.clone(),
            saver: timing.save.clone(),
            timing,
            last_saved: last_saved.map(Arc::new),
            current: None,
            applied: None,
            applying: None,
            cleaned: false,
            retry_at: None,
            next_poll: None,
            next_observe: None,
            refused_text: None,
            mismatch: None,
            held: BTreeSet::new(),
        }
    }

    /// The newest good state (for this actor's provider).
    pub fn current(&self) -> Option<&Arc<State>> {
        self.current.as_ref()
    }
    /// The state the daemons were last brought to.
    pub fn applied(&self) -> Option<&Arc<State>> {
        self.applied.as_ref()
    }

    /// One step: what to do now about `input`.
    pub fn step(&mut self, input: Input, now: Instant) -> Vec<Action> {
        let mut out = Vec::new();
        match input {
            Input::Tick => {
                if self.next_poll.is_none_or(|t| now >= t) {
                    self.next_poll = Some(now + self.timing.poll_every);
                    out.push(Action::PollSource);
                } else {
                    self.after_poll(now, &mut out);
                }
            }
            Input::Polled(p) => {
                self.polled(p, now, &mut out);
                self.after_poll(now, &mut out);
            }
            Input::Applied(a) => {
                self.applied_outcome(a, now, &mut out);
                out.push(Action::Supervise);
            }
            Input::Supervised(s) => self.supervised(s, now, &mut out),
            Input::Observed(held) => self.observed(held, &mut out),
            Input::Shutdown => self.shutdown(&mut out),
        }
        out
    }

    fn polled(&mut self, p: Poll, now: Instant, out: &mut Vec<Action>) {
        match p {
            Poll::Unchanged => {}
            Poll::State(s) => self.arrived(s, now, out),
            Poll::Refused { text, error } => {
                if let Some(t) = text {
                    if self.refused_text.as_ref() == Some(&t) {
                        return;
                    }
                    self.refused_text = Some(t);
                }
                out.push(Action::CountRefused);
                out.push(Action::Log(Note::StateRefused {
                    error: error.clone(),
                }));
                out.push(Action::SetError(Some(format!("state refused: {error}"))));
            }
            Poll::Unavailable(error) => {
                if self.current.is_none() && self.mismatch.is_none() {
                    if let Some(s) = self.last_saved.clone() {
                        out.push(Action::Log(Note::StartingFromLastSaved { error }));
                        self.arrived(s, now, out);
                    }
                }
            }
        }
    }

    /// A parsed state: refused if planned for another provider, else the new current
    /// state (if it is new).
    fn arrived(&mut self, s: Arc<State>, now: Instant, out: &mut Vec<Action>) {
        if let Some(planned) = provider_mismatch(&s, self.provider) {
            out.push(Action::CountRefused);
            if self.mismatch != Some(planned) {
                self.mismatch = Some(planned);
                out.push(Action::Log(Note::ProviderMismatch {
                    planned,
                    actor: self.provider,
                    applied: self.applied.is_some(),
                }));
                out.push(Action::SetProviderMismatch(Some(planned)));
            }
            return;
        }
        if self.mismatch.take().is_some() {
            out.push(Action::Log(Note::ProviderMatchesAgain {
                provider: self.provider,
            }));
            out.push(Action::SetProviderMismatch(None));
        }
        if self.current.as_deref() != Some(&*s) {
            out.push(Action::Log(Note::NewState {
                vips: s.vips.len(),
                services: s.services.len(),
            }));
            self.current = Some(s);
            self.debouncer.changed(now);
        }
    }

    /// After the poll: the start-up cleanup, then an apply if one is due.
    fn after_poll(&mut self, now: Instant, out: &mut Vec<Action>) {
        // Stale VIPs go before keepalived ever starts.
        if !self.cleaned {
            if let Some(s) = &self.current {
                let states = std::iter::once(s.clone())
                    .chain(self.last_saved.clone())
                    .collect();
                out.push(Action::RemoveStaleVips(states));
                self.cleaned = true;
            }
        }
        let due = self.debouncer.fire(now) || self.retry_at.is_some_and(|t| now >= t);
        match &self.current {
            Some(s) if due && self.cleaned => {
                let known_vips = self
                    .applied
                    .iter()
                    .chain(self.last_saved.iter())
                    .flat_map(|st| st.vips.keys().copied())
                    .collect();
                self.applying = Some(s.clone());
                out.push(Action::Apply {
                    state: s.clone(),
                    known_vips,
                });
            }
            _ => out.push(Action::Supervise),
        }
    }

    fn applied_outcome(&mut self, a: ApplyOutcome, now: Instant, out: &mut Vec<Action>) {
        let state = self.applying.take();
        match a {
            ApplyOutcome::Deferred(t) => self.retry_at = Some(t),
            ApplyOutcome::Done {
                changed,
                handover_until,
            } => {
                self.retry_at = handover_until;
                let first = self.applied.is_none();
                if let Some(s) = state {
                    if first {
                        out.push(Action::SaveLastState(s.clone()));
                        self.saver.clear();
                    } else if changed {
                        // Debounced: for 10,000 Services the file is ~29 MB (50 ms to
                        // serialise, more to sync), too much for every endpoint change.
                        self.saver.changed(now);
                    }
                    self.applied = Some(s);
                }
                out.push(Action::SetError(None));
            }
            ApplyOutcome::Failed(e) => {
                out.push(Action::SetError(Some(e)));
                self.retry_at = Some(now + self.timing.retry_failed_after);
            }
        }
    }

    fn supervised(&mut self, s: Supervised, now: Instant, out: &mut Vec<Action>) {
        if s.keepalived_exited {
            let states = self
                .applied
                .iter()
                .chain(self.current.iter())
                .chain(self.last_saved.iter())
                .cloned()
                .collect();
            out.push(Action::RemoveVipsOfDeadKeepalived(states));
        }
        if s.wants_apply {
            self.debouncer.changed(now);
        }
        // Ready only while the daemons run the applied config and the newest state is
        // for this provider.
        let refused = self
            .mismatch
            .map(|p| refusal(p, self.provider, self.applied.is_some()));
        out.push(Action::SetReadiness(refused.or(s.not_ready)));
        // Only a state that was applied as a whole is saved (not a newer one that failed).
        if self.saver.fire(now) {
            if let Some(a) = &self.applied {
                out.push(Action::SaveLastState(a.clone()));
            }
        }
        if self.next_observe.is_none_or(|t| now >= t) {
            self.next_observe = Some(now + self.timing.observe_every);
            if let Some(c) = &self.current {
                out.push(Action::ObserveVips(c.clone()));
            }
        }
    }

    fn observed(&mut self, held: BTreeSet<IpAddr>, out: &mut Vec<Action>) {
        if held != self.held {
            let gained = held.difference(&self.held).copied().collect();
            let lost = self.held.difference(&held).copied().collect();
            out.push(Action::Log(Note::HeldChanged {
                held: held.clone(),
                gained,
                lost,
            }));
            self.held = held;
        }
    }

    fn shutdown(&mut self, out: &mut Vec<Action>) {
        if self.saver.pending() {
            if let Some(a) = &self.applied {
                out.push(Action::SaveLastState(a.clone()));
            }
        }
        out.push(Action::Log(Note::ShuttingDown));
        // What runs is the applied state; the VIPs of a newer one are not held yet.
        if let Some(s) = self.applied.as_ref().or(self.current.as_ref()) {
            out.push(Action::HandOver(s.clone()));
        }
        out.push(Action::StopKeepalived);
        let states = self
            .current
            .iter()
            .chain(self.last_saved.iter())
            .cloned()
            .collect();
        out.push(Action::RemoveVips(states));
        out.push(Action::StopProxy);
        out.push(Action::Log(Note::Stopped));
        out.push(Action::Exit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8slb_common::state::VipState;

    /// A state with the one VIP `198.18.7.<n>`, planned for `provider`; `n` is its name
    /// in the tables.
    fn st(n: u8, provider: Option<Provider>) -> Arc<State> {
        let mut s = State::from_json(include_str!("../tests/fixtures/empty.json")).unwrap();
        s.provider = provider;
        s.vips.insert(
            IpAddr::from([198, 18, 7, n]),
            VipState {
                pool: "default".parse().unwrap(),
                vrid: 7,
                owner: None,
                services: vec![],
                ingress: false,
                gateways: vec![],
            },
        );
        Arc::new(s)
    }

    fn name(s: &State) -> String {
        s.vips
            .keys()
            .map(|ip| match ip {
                IpAddr::V4(v) => v.octets()[3].to_string(),
                IpAddr::V6(_) => "?".into(),
            })
            .collect()
    }

    fn names(states: &[Arc<State>]) -> String {
        states.iter().map(|s| name(s)).collect::<Vec<_>>().join(",")
    }

    /// Short labels: `Apply(10)`, `Log(NewState)`, `SetReadiness(ready)`, ...
    fn label(a: &Action) -> String {
        match a {
            Action::PollSource => "PollSource".into(),
            Action::RemoveStaleVips(s) => format!("RemoveStaleVips({})", names(s)),
            Action::Apply { state, known_vips } => {
                format!("Apply({}, known {})", name(state), known_vips.len())
            }
            Action::Supervise => "Supervise".into(),
            Action::RemoveVipsOfDeadKeepalived(s) => {
                format!("RemoveVipsOfDeadKeepalived({})", names(s))
            }
            Action::SetReadiness(None) => "SetReadiness(ready)".into(),
            Action::SetReadiness(Some(_)) => "SetReadiness(not ready)".into(),
            Action::SetError(e) => {
                format!("SetError({})", if e.is_some() { "some" } else { "none" })
            }
            Action::CountRefused => "CountRefused".into(),
            Action::SetProviderMismatch(p) => format!("SetProviderMismatch({p:?})"),
            Action::SaveLastState(s) => format!("SaveLastState({})", name(s)),
            Action::ObserveVips(s) => format!("ObserveVips({})", name(s)),
            Action::Log(n) => {
                let dbg = format!("{n:?}");
                let kind = dbg.split([' ', '{', '(']).next().unwrap_or("").to_string();
                format!("Log({kind})")
            }
            Action::HandOver(s) => format!("HandOver({})", name(s)),
            Action::StopKeepalived => "StopKeepalived".into(),
            Action::RemoveVips(s) => format!("RemoveVips({})", names(s)),
            Action::StopProxy => "StopProxy".into(),
            Action::Exit => "Exit".into(),
        }
    }

    fn timing() -> Timing {
        Timing {
            poll_every: Duration::from_millis(50),
            observe_every: Duration::from_secs(2),
            retry_failed_after: Duration::from_secs(10),
            save: Debouncer::new(Duration::from_secs(1), Duration::from_secs(10)),
            debounce: Debouncer::new(Duration::from_millis(100), Duration::from_secs(1)),
        }
    }

    fn ready() -> Input {
        Input::Supervised(Supervised::default())
    }

    fn done(changed: bool) -> Input {
        Input::Applied(ApplyOutcome::Done {
            changed,
            handover_until: None,
        })
    }

    fn polled(s: &Arc<State>) -> Input {
        Input::Polled(Poll::State(s.clone()))
    }

    fn unchanged() -> Input {
        Input::Polled(Poll::Unchanged)
    }

    /// A supervision pass after which a daemon asks for an apply.
    fn wants_apply() -> Input {
        Input::Supervised(Supervised {
            wants_apply: true,
            ..Default::default()
        })
    }

    /// One row of a table: at `ms`, this input, these action labels.
    type Row<'a> = (u64, Input, &'a [&'a str]);

    /// With `st(1)` saved: `st(2)` arrives, is applied at 100 ms and saved at once; `st(3)`
    /// arrives at 150 ms (its burst is due at 250 ms).
    fn two_applied_then_three_arrives() -> Vec<Row<'static>> {
        vec![
            (
                0,
                polled(&st(2, None)),
                &["Log(NewState)", "RemoveStaleVips(2,1)", "Supervise"],
            ),
            (100, unchanged(), &["Apply(2, known 1)"]),
            (
                100,
                done(true),
                &["SaveLastState(2)", "SetError(none)", "Supervise"],
            ),
            (150, polled(&st(3, None)), &["Log(NewState)", "Supervise"]),
        ]
    }

    /// Feeds each row's input at `t0 + ms` and checks the labels of the actions.
    fn table(ctl: &mut Control, rows: &[Row<'_>]) -> Vec<Vec<Action>> {
        let t0 = t0();
        let mut all = Vec::new();
        for (i, (ms, input, want)) in rows.iter().enumerate() {
            let got = ctl.step(input.clone(), t0 + Duration::from_millis(*ms));
            let labels: Vec<String> = got.iter().map(label).collect();
            assert_eq!(labels, *want, "row {i} ({input:?} at {ms} ms)");
            all.push(got);
        }
        all
    }

    /// One fixed origin for every table of a test (the step never reads the clock).
    fn t0() -> Instant {
        static T0: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        *T0.get_or_init(Instant::now)
    }

    #[test]
    fn a_first_state_is_cleaned_up_after_debounced_applied_and_saved_at_once() {
        let a = st(10, Some(Provider::Haproxy));
        let mut c = Control::new(Provider::Haproxy, timing(), None);
        table(
            &mut c,
            &[
                (0, Input::Tick, &["PollSource"]),
                (0, unchanged(), &["Supervise"]),
                // Nothing to observe without a state.
                (0, ready(), &["SetReadiness(ready)"]),
                (50, Input::Tick, &["PollSource"]),
                (
                    50,
                    polled(&a),
                    &["Log(NewState)", "RemoveStaleVips(10)", "Supervise"],
                ),
                // Observed every 2 s (the first look, at 0 ms, had no state).
                (50, ready(), &["SetReadiness(ready)"]),
                // Not polled again before 100 ms; the 100 ms quiet is not over yet.
                (90, Input::Tick, &["Supervise"]),
                (100, Input::Tick, &["PollSource"]),
                (100, unchanged(), &["Supervise"]),
                (150, Input::Tick, &["PollSource"]),
                (150, unchanged(), &["Apply(10, known 0)"]),
                (
                    150,
                    done(true),
                    &["SaveLastState(10)", "SetError(none)", "Supervise"],
                ),
                (150, ready(), &["SetReadiness(ready)"]),
                // The same state again is not new.
                (200, Input::Tick, &["PollSource"]),
                (200, polled(&a), &["Supervise"]),
                (200, ready(), &["SetReadiness(ready)"]),
                (5000, Input::Tick, &["PollSource"]),
                (5000, unchanged(), &["Supervise"]),
                (5000, ready(), &["SetReadiness(ready)", "ObserveVips(10)"]),
            ],
        );
        assert_eq!(c.applied(), Some(&a));
    }

    #[test]
    fn without_a_source_at_start_the_last_saved_state_is_used_once() {
        let saved = st(20, None);
        let mut c = Control::new(Provider::Nginx, timing(), Some((*saved).clone()));
        let unavailable = || Input::Polled(Poll::Unavailable("connection refused".into()));
        table(
            &mut c,
            &[
                (
                    0,
                    unavailable(),
                    &[
                        "Log(StartingFromLastSaved)",
                        "Log(NewState)",
                        "RemoveStaleVips(20,20)",
                        "Supervise",
                    ],
                ),
                (10, unavailable(), &["Supervise"]),
                (100, unavailable(), &["Apply(20, known 1)"]),
            ],
        );
        assert_eq!(c.current(), Some(&saved));
    }

    #[test]
    fn an_unreadable_document_is_reported_once_per_text() {
        let mut c = Control::new(Provider::Haproxy, timing(), None);
        let refused = |text: Option<&str>| {
            Input::Polled(Poll::Refused {
                text: text.map(str::to_string),
                error: "expected value".into(),
            })
        };
        let reported = &[
            "CountRefused",
            "Log(StateRefused)",
            "SetError(some)",
            "Supervise",
        ][..];
        table(
            &mut c,
            &[
                (0, refused(Some("{")), reported),
                (50, refused(Some("{")), &["Supervise"]),
                (100, refused(Some("[")), reported),
                // The ConfigMap source reports each refused document once itself.
                (150, refused(None), reported),
                (200, refused(None), reported),
            ],
        );
    }

    #[test]
    fn failed_deferred_and_held_out_applies_are_tried_again_at_their_time() {
        let (a, b) = (st(10, None), st(11, None));
        let mut c = Control::new(Provider::Haproxy, timing(), None);
        let t = |ms: u64| t0() + Duration::from_millis(ms);
        table(
            &mut c,
            &[
                (
                    0,
                    polled(&a),
                    &["Log(NewState)", "RemoveStaleVips(10)", "Supervise"],
                ),
                (100, unchanged(), &["Apply(10, known 0)"]),
                (
                    100,
                    Input::Applied(ApplyOutcome::Failed("haproxy: check failed".into())),
                    &["SetError(some)", "Supervise"],
                ),
                (5000, unchanged(), &["Supervise"]),
                (10_100, unchanged(), &["Apply(10, known 0)"]),
                (
                    10_100,
                    Input::Applied(ApplyOutcome::Done {
                        changed: true,
                        handover_until: Some(t(12_100)),
                    }),
                    &["SaveLastState(10)", "SetError(none)", "Supervise"],
                ),
                (12_000, unchanged(), &["Supervise"]),
                // The hand-over hold-down ends: apply again (the VIP joins).
                (12_100, unchanged(), &["Apply(10, known 1)"]),
                (12_100, done(true), &["SetError(none)", "Supervise"]),
                (12_200, polled(&b), &["Log(NewState)", "Supervise"]),
                (12_300, unchanged(), &["Apply(11, known 1)"]),
                (
                    12_300,
                    Input::Applied(ApplyOutcome::Deferred(t(13_000))),
                    &["Supervise"],
                ),
                (12_900, unchanged(), &["Supervise"]),
                (13_000, unchanged(), &["Apply(11, known 1)"]),
            ],
        );
        assert_eq!(c.applied(), Some(&a), "deferred: b is not applied yet");
    }

    #[test]
    fn later_changes_are_saved_after_a_quiet_second_and_at_most_ten_seconds_late() {
        let timing = Timing {
            observe_every: Duration::from_secs(3600),
            ..timing()
        };
        let mut c = Control::new(Provider::Haproxy, timing, None);
        let mut rows: Vec<(u64, Input, Vec<String>)> = vec![
            (
                0,
                polled(&st(1, None)),
                vec![
                    "Log(NewState)".into(),
                    "RemoveStaleVips(1)".into(),
                    "Supervise".into(),
                ],
            ),
            (100, unchanged(), vec!["Apply(1, known 0)".into()]),
            (
                100,
                done(true),
                vec![
                    "SaveLastState(1)".into(),
                    "SetError(none)".into(),
                    "Supervise".into(),
                ],
            ),
        ];
        // A new state every 600 ms, applied 100 ms later: never a quiet second. The
        // first unsaved change is applied at 1300 ms: saved at 11300 ms at the latest
        // (at the first supervision step from then on: 11400 ms, before 19 is applied).
        let mut saved_late = false;
        for i in 2..=19u8 {
            let at = u64::from(i) * 600;
            let mut supervised = |t: u64, applied: u8| {
                let mut l = vec!["SetReadiness(ready)".to_string()];
                if t >= 11_300 && !saved_late {
                    saved_late = true;
                    l.push(format!("SaveLastState({applied})"));
                }
                if t == 1200 {
                    l.push("ObserveVips(2)".into()); // the first look
                }
                (t, ready(), l)
            };
            rows.push((
                at,
                polled(&st(i, None)),
                vec!["Log(NewState)".into(), "Supervise".into()],
            ));
            rows.push(supervised(at, i - 1));
            rows.push((at + 100, unchanged(), vec![format!("Apply({i}, known 1)")]));
            rows.push((
                at + 100,
                done(true),
                vec!["SetError(none)".into(), "Supervise".into()],
            ));
            rows.push(supervised(at + 100, i));
        }
        assert!(saved_late);
        // Then quiet: saved a second after the last applied change (11500 ms).
        rows.push((12_499, ready(), vec!["SetReadiness(ready)".into()]));
        rows.push((
            12_500,
            ready(),
            vec!["SetReadiness(ready)".into(), "SaveLastState(19)".into()],
        ));
        let rows: Vec<(u64, Input, Vec<&str>)> = rows
            .iter()
            .map(|(t, i, l)| (*t, i.clone(), l.iter().map(String::as_str).collect()))
            .collect();
        let rows: Vec<(u64, Input, &[&str])> = rows
            .iter()
            .map(|(t, i, l)| (*t, i.clone(), &l[..]))
            .collect();
        table(&mut c, &rows);
    }

    #[test]
    fn keepalived_exiting_removes_the_vips_of_every_known_state_and_a_restart_applies_again() {
        let mut c = Control::new(Provider::Haproxy, timing(), Some((*st(1, None)).clone()));
        let mut rows = two_applied_then_three_arrives();
        rows.extend([
            (
                150,
                Input::Supervised(Supervised {
                    keepalived_exited: true,
                    wants_apply: false,
                    not_ready: Some("keepalived not running: exited (signal 9)".into()),
                }),
                &[
                    "RemoveVipsOfDeadKeepalived(2,3,1)",
                    "SetReadiness(not ready)",
                    "ObserveVips(3)",
                ][..],
            ),
            (250, unchanged(), &["Apply(3, known 2)"]),
            (250, done(true), &["SetError(none)", "Supervise"]),
            // A daemon back after a failed apply asks for an apply: debounced.
            (300, wants_apply(), &["SetReadiness(ready)"]),
            (350, unchanged(), &["Supervise"]),
            (400, unchanged(), &["Apply(3, known 2)"]),
        ]);
        table(&mut c, &rows);
    }

    #[test]
    fn a_state_for_another_provider_is_refused_once_and_what_runs_stays() {
        let nginx = |n| st(n, Some(Provider::Nginx));
        let haproxy = |n| st(n, Some(Provider::Haproxy));
        let mut c = Control::new(Provider::Haproxy, timing(), None);
        let all = table(
            &mut c,
            &[
                // Never applied: nothing is cleaned up or applied, readiness says why.
                (
                    0,
                    polled(&nginx(1)),
                    &[
                        "CountRefused",
                        "Log(ProviderMismatch)",
                        "SetProviderMismatch(Some(Nginx))",
                        "Supervise",
                    ],
                ),
                (0, ready(), &["SetReadiness(not ready)"]),
                // Another one: counted, not logged again.
                (50, polled(&nginx(2)), &["CountRefused", "Supervise"]),
                (200, unchanged(), &["Supervise"]),
                (200, ready(), &["SetReadiness(not ready)"]),
                // One for this actor: taken, and the refusal ends.
                (
                    250,
                    polled(&haproxy(3)),
                    &[
                        "Log(ProviderMatchesAgain)",
                        "SetProviderMismatch(None)",
                        "Log(NewState)",
                        "RemoveStaleVips(3)",
                        "Supervise",
                    ],
                ),
                (350, unchanged(), &["Apply(3, known 0)"]),
                (
                    350,
                    done(true),
                    &["SaveLastState(3)", "SetError(none)", "Supervise"],
                ),
                (350, ready(), &["SetReadiness(ready)"]),
                // Applied, then a state for nginx: refused, the applied state stays
                // current (a retry applies it, not the refused one).
                (
                    400,
                    polled(&nginx(4)),
                    &[
                        "CountRefused",
                        "Log(ProviderMismatch)",
                        "SetProviderMismatch(Some(Nginx))",
                        "Supervise",
                    ],
                ),
                (400, wants_apply(), &["SetReadiness(not ready)"]),
                (500, unchanged(), &["Apply(3, known 1)"]),
                // A state without the field (an older watcher) is not refused.
                (
                    600,
                    polled(&st(5, None)),
                    &[
                        "Log(ProviderMatchesAgain)",
                        "SetProviderMismatch(None)",
                        "Log(NewState)",
                        "Supervise",
                    ],
                ),
            ],
        );
        let reason = |row: usize| match all[row].first() {
            Some(Action::SetReadiness(Some(why))) => why.clone(),
            other => panic!("row {row}: {other:?}"),
        };
        assert_eq!(
            reason(1),
            "the state was planned for provider nginx, but this actor runs haproxy \
             (--proxy / PROXY must match the watcher's); it is not rendered, nothing was \
             applied yet"
        );
        assert!(
            reason(10).ends_with("the last applied state keeps running"),
            "{}",
            reason(10)
        );
        assert_eq!(c.current(), Some(&st(5, None)));
    }

    #[test]
    fn a_last_saved_state_for_another_provider_is_refused_too() {
        let mut c = Control::new(
            Provider::Kubeproxy,
            timing(),
            Some((*st(1, Some(Provider::Haproxy))).clone()),
        );
        let unavailable = || Input::Polled(Poll::Unavailable("no API server".into()));
        table(
            &mut c,
            &[
                (
                    0,
                    unavailable(),
                    &[
                        "Log(StartingFromLastSaved)",
                        "CountRefused",
                        "Log(ProviderMismatch)",
                        "SetProviderMismatch(Some(Haproxy))",
                        "Supervise",
                    ],
                ),
                // Not tried (nor counted) again on every poll.
                (50, unavailable(), &["Supervise"]),
                (150, unavailable(), &["Supervise"]),
            ],
        );
        assert_eq!(c.current(), None);
    }

    #[test]
    fn the_vips_held_are_logged_when_they_change() {
        let mut c = Control::new(Provider::Haproxy, timing(), None);
        let held = |ips: &[u8]| -> BTreeSet<IpAddr> {
            ips.iter().map(|n| IpAddr::from([198, 18, 7, *n])).collect()
        };
        let all = table(
            &mut c,
            &[
                (0, Input::Observed(held(&[])), &[]),
                (0, Input::Observed(held(&[1, 2])), &["Log(HeldChanged)"]),
                (0, Input::Observed(held(&[1, 2])), &[]),
                (0, Input::Observed(held(&[2, 3])), &["Log(HeldChanged)"]),
            ],
        );
        assert_eq!(
            all[3],
            vec![Action::Log(Note::HeldChanged {
                held: held(&[2, 3]),
                gained: held(&[3]),
                lost: held(&[1]),
            })]
        );
    }

    #[test]
    fn shutdown_hands_over_then_stops_keepalived_then_removes_the_vips_then_stops_the_proxy() {
        let mut c = Control::new(Provider::Haproxy, timing(), Some((*st(1, None)).clone()));
        let mut rows = two_applied_then_three_arrives();
        rows.extend([
            (250, unchanged(), &["Apply(3, known 2)"][..]),
            (250, done(true), &["SetError(none)", "Supervise"]),
            // 3 was applied and not saved yet: saved first.
            (
                300,
                Input::Shutdown,
                &[
                    "SaveLastState(3)",
                    "Log(ShuttingDown)",
                    "HandOver(3)",
                    "StopKeepalived",
                    "RemoveVips(3,1)",
                    "StopProxy",
                    "Log(Stopped)",
                    "Exit",
                ],
            ),
        ]);
        table(&mut c, &rows);
    }

    #[test]
    fn shutdown_before_any_state_hands_nothing_over() {
        let mut c = Control::new(Provider::Haproxy, timing(), None);
        table(
            &mut c,
            &[(
                0,
                Input::Shutdown,
                &[
                    "Log(ShuttingDown)",
                    "StopKeepalived",
                    "RemoveVips()",
                    "StopProxy",
                    "Log(Stopped)",
                    "Exit",
                ][..],
            )],
        );
    }
}

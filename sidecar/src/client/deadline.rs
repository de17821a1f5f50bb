//! The engine client's side of deadline serving: which replica a deadline call goes to
//! (the routing rule's pick composed with predicted completions, [`slo::dispatch`]), its
//! place in that replica's gate (or the refusal as a [`ClientError`]), and what the call asks
//! of the engine once the replica's cached prefix is taken off.

use serde_json::Value;

use super::replica::{Replica, can_take};
use super::route::RouteHint;
use super::{ClientError, EngineClient, mirror, route};
use crate::slo::{self, Deadline, Demand, Permit};

impl EngineClient {
    /// Load-aware dispatch: the rule's `pick`, or a replica whose predicted completion for
    /// this call is clearly shorter ([`slo::dispatch`]).
    pub(super) fn dispatch(
        &self,
        pick: usize,
        tried: &[usize],
        demand: Demand,
        hint: &RouteHint<'_>,
    ) -> usize {
        if self.replicas.len() < 2 {
            return pick;
        }
        let predicted: Vec<(usize, Option<f64>)> = self
            .replicas
            .iter()
            .enumerate()
            .filter(|&(i, _)| can_take(&self.replicas, tried, i))
            .map(|(i, r)| {
                let d = uncached(r, demand, hint);
                (i, r.slo.predict_completion_ms(d, r.in_flight()))
            })
            .collect();
        let chosen = slo::dispatch::choose(pick, &predicted, self.settings.slo.dispatch_threshold);
        if chosen != pick
            && let Some(c) = &self.slo_switches
        {
            c.inc();
        }
        chosen
    }
}

/// Waits for `replica`'s gate to give a call with `deadline` a place, or refuses it.
pub(super) async fn admit(
    replica: &Replica,
    deadline: Deadline,
    demand: Demand,
    hint: &RouteHint<'_>,
) -> Result<Permit, ClientError> {
    let demand = uncached(replica, demand, hint);
    replica
        .slo
        .admit(deadline, demand, replica.in_flight())
        .await
        .map_err(|refusal| ClientError::DeadlineUnreachable {
            upstream: replica.label.clone(),
            refusal,
        })
}

/// `demand` on `replica`: the prompt tokens its exact routing mirror holds are not computed.
pub(super) fn uncached(replica: &Replica, demand: Demand, hint: &RouteHint<'_>) -> Demand {
    // Text prompts are keyed by bytes: a mirror of token blocks cannot say what they hold.
    if hint.keys.keys.is_empty() || !hint.keys.token_ids {
        return demand;
    }
    let held = replica.mirror.exact().map_or(0, |v| {
        mirror::held_prefix(&v, &hint.keys.keys) * route::keys::TOKENS_PER_KEY
    });
    Demand {
        uncached_tokens: demand.uncached_tokens.saturating_sub(held as u32),
        ..demand
    }
}

/// What a JSON call asks of the engine: its token prompt's length (or the text's bytes / 4)
/// and `max_tokens` (16, vLLM's default, when absent).
pub(super) fn json_demand(
    engine: recache_adapters::Engine,
    path: &str,
    body: Option<&Value>,
) -> Demand {
    match body.and_then(Value::as_object) {
        Some(obj) => crate::slo::demand_of(engine.token_prompt_field(path), obj),
        None => Demand::default(),
    }
}

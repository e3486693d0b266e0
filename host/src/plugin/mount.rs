//! A deployment's plugins mounted on a waterfall, and reloading them.
//!
//! Each plugin sits in a [`Slot`]; the waterfall holds gates in file order in front and answerers
//! in file order at the back. [`Mounted::apply`] moves to a new deployment: new versions are
//! compiled first, off the request path, then swapped in; a version that fails to load leaves the
//! old one serving (never silently dropping a gate); removed plugins are unloaded; and the
//! waterfall is re-ordered in one atomic change, so no request ever sees it without a gate.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

use super::slot::{Counters, QuarantinePolicy, Slot, SlotListener, SlotState};
use super::spec::{PluginSpec, Role};
use super::{Plugin, PluginError, PluginHost};
use crate::waterfall::{Listener, Position, Registration, Scope, Waterfall};

/// A plugin as `plugins/list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PluginStatus {
    /// The plugin's name.
    pub name: String,
    /// `gate` or `answerer`.
    pub role: &'static str,
    /// The SHA-256 of the version serving (absent if none ever loaded).
    pub digest: Option<String>,
    /// The plugin API version it was built against.
    #[serde(rename = "apiVersion")]
    pub api_version: Option<String>,
    /// loaded | failed | quarantined.
    pub state: SlotState,
    /// Why the last load failed, when it did.
    pub error: Option<String>,
    /// Counters.
    pub counters: Counters,
    /// While quarantined: how many seconds are left before it runs again (rounded up).
    #[serde(rename = "quarantinedForS", skip_serializing_if = "Option::is_none")]
    pub quarantined_for_s: Option<u64>,
    /// For a plugin that may wait (`wait_ms`): how many of its questions wait for a callback
    /// now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<usize>,
}

/// What [`Mounted::apply`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReloadReport {
    /// Plugins mounted for the first time.
    pub added: Vec<String>,
    /// Plugins whose new version was swapped in.
    pub swapped: Vec<String>,
    /// Plugins unloaded because their entry is gone.
    pub removed: Vec<String>,
    /// Plugins whose new version failed to load, with why (the old version, if any, serves).
    pub failed: Vec<(String, String)>,
}

/// A check a new version must pass before it serves: its spec and bytes, or why not.
pub type Acceptance<'a> = dyn Fn(&PluginSpec, &[u8]) -> Result<(), String> + 'a;

/// Plugins registered on a waterfall (a service's: `&service` is one), in waterfall order.
/// Dropping it unloads them all.
pub struct Mounted {
    waterfall: Waterfall,
    policy: QuarantinePolicy,
    slots: Vec<(PluginSpec, Arc<Slot>)>,
    /// Entries that never loaded: name → (spec, error).
    unloaded: BTreeMap<String, (PluginSpec, String)>,
    registrations: Vec<Registration>,
}

impl std::fmt::Debug for Mounted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.slots.iter().map(|(s, _)| &s.name))
            .finish()
    }
}

impl Mounted {
    /// Registers `plugins` on `waterfall`: gates in front, in the given order, ahead of every
    /// listener already registered; answerers at the back, in the given order.
    pub fn mount(waterfall: &impl AsRef<Waterfall>, plugins: Vec<Arc<Plugin>>) -> Mounted {
        Self::mount_with(waterfall, plugins, QuarantinePolicy::default())
    }

    /// [`Mounted::mount`] with a quarantine policy.
    pub fn mount_with(
        waterfall: &impl AsRef<Waterfall>,
        plugins: Vec<Arc<Plugin>>,
        policy: QuarantinePolicy,
    ) -> Mounted {
        let mut mounted = Mounted {
            waterfall: waterfall.as_ref().clone(),
            policy,
            slots: plugins
                .into_iter()
                .map(|p| (p.spec().clone(), Slot::new(p, policy)))
                .collect(),
            unloaded: BTreeMap::new(),
            registrations: Vec::new(),
        };
        mounted.reregister();
        mounted
    }

    /// Loads every plugin `specs` lists (a deployment is such a list), all or nothing: a
    /// deployment that cannot load one of its plugins must not run without it; and mounts them
    /// on `waterfall`.
    pub fn load(
        waterfall: &impl AsRef<Waterfall>,
        host: &PluginHost,
        specs: &impl AsRef<[PluginSpec]>,
    ) -> Result<Mounted, PluginError> {
        Self::load_with(waterfall, host, specs, QuarantinePolicy::default())
    }

    /// [`Mounted::load`] with a quarantine policy.
    pub fn load_with(
        waterfall: &impl AsRef<Waterfall>,
        host: &PluginHost,
        specs: &impl AsRef<[PluginSpec]>,
        policy: QuarantinePolicy,
    ) -> Result<Mounted, PluginError> {
        let plugins = specs
            .as_ref()
            .iter()
            .map(|spec| host.load(spec))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self::mount_with(waterfall, plugins, policy))
    }

    /// Re-registers every slot in deployment order, as one change to the waterfall.
    fn reregister(&mut self) {
        let gates = self.slots.iter().filter(|(s, _)| s.role == Role::Gate);
        let answerers = self.slots.iter().filter(|(s, _)| s.role == Role::Answerer);
        let mut add: Vec<(String, Scope, Position, Arc<dyn Listener>)> = Vec::new();
        // Prepending in reverse leaves the gates in file order at the front.
        for (spec, slot) in gates.collect::<Vec<_>>().into_iter().rev() {
            add.push((
                spec.name.clone(),
                Scope::Global,
                Position::Front,
                Arc::new(SlotListener(slot.clone())),
            ));
        }
        for (spec, slot) in answerers {
            add.push((
                spec.name.clone(),
                Scope::Global,
                Position::Back,
                Arc::new(SlotListener(slot.clone())),
            ));
        }
        let old = std::mem::take(&mut self.registrations);
        self.registrations = self.waterfall.swap(old, add);
    }

    /// The mounted plugins' current versions, in deployment order.
    pub fn plugins(&self) -> Vec<Arc<Plugin>> {
        self.slots.iter().map(|(_, s)| s.plugin()).collect()
    }

    /// The slot of the plugin named `name`.
    pub fn slot(&self, name: &str) -> Option<&Arc<Slot>> {
        self.slots
            .iter()
            .find(|(s, _)| s.name == name)
            .map(|(_, s)| s)
    }

    /// Every plugin of the deployment, loaded or not, in deployment order.
    pub fn status(&self) -> Vec<PluginStatus> {
        let mut out: Vec<PluginStatus> = self
            .slots
            .iter()
            .map(|(spec, slot)| {
                let (state, error, counters) = slot.status();
                let quarantined_for_s = slot
                    .quarantine_left()
                    .map(|d| d.as_millis().div_ceil(1000) as u64);
                let plugin = slot.plugin();
                PluginStatus {
                    name: spec.name.clone(),
                    role: spec.role.as_str(),
                    digest: Some(plugin.digest().to_owned()),
                    api_version: Some(plugin.api_version().to_owned()),
                    state,
                    error,
                    counters,
                    quarantined_for_s,
                    waiting: spec.wait.map(|_| plugin.waiting()),
                }
            })
            .collect();
        out.extend(self.unloaded.values().map(|(spec, error)| PluginStatus {
            name: spec.name.clone(),
            role: spec.role.as_str(),
            digest: None,
            api_version: None,
            state: SlotState::Failed,
            error: Some(error.clone()),
            counters: Counters::default(),
            quarantined_for_s: None,
            waiting: None,
        }));
        out
    }

    /// Unloads the plugin named `name`: its listener is gone from the next request on, while a
    /// decision already running finishes on the instance it started on. Returns whether it was
    /// mounted.
    pub fn unload(&mut self, name: &str) -> bool {
        let before = self.slots.len();
        self.slots.retain(|(s, _)| s.name != name);
        let removed = before != self.slots.len();
        if removed {
            self.reregister();
        }
        removed
    }

    /// Ends every quarantine now.
    pub fn release_all(&self) {
        for (_, slot) in &self.slots {
            slot.release();
        }
    }

    /// Moves to the plugins `specs` lists (a deployment). Compiles what changed (a plugin whose
    /// spec or file digest differs) before touching the waterfall; see the module doc for what
    /// happens on failure. Blocking: run it off the async workers.
    pub fn apply(&mut self, host: &PluginHost, specs: &impl AsRef<[PluginSpec]>) -> ReloadReport {
        self.apply_checked(host, specs, &|_, _| Ok(()))
    }

    /// [`Mounted::apply`], with every new or changed version first passed to `accept` (its spec
    /// and bytes): one it refuses fails to load as a broken file does, and the old version keeps
    /// serving.
    pub fn apply_checked(
        &mut self,
        host: &PluginHost,
        specs: &impl AsRef<[PluginSpec]>,
        accept: &Acceptance<'_>,
    ) -> ReloadReport {
        let mut report = ReloadReport::default();
        let mut next: Vec<(PluginSpec, Arc<Slot>)> = Vec::new();
        let mut unloaded = BTreeMap::new();
        for spec in specs.as_ref() {
            let current = self.slots.iter().find(|(s, _)| s.name == spec.name);
            let bytes = std::fs::read(&spec.path);
            let unchanged = match (&current, &bytes) {
                (Some((old, slot)), Ok(bytes)) => {
                    old == spec && slot.plugin().digest() == super::digest(bytes)
                }
                _ => false,
            };
            if unchanged {
                if let Some((_, slot)) = current {
                    next.push((spec.clone(), slot.clone()));
                }
                continue;
            }
            let loaded = match bytes {
                Ok(bytes) => host.load_bytes(spec, &bytes).and_then(|plugin| {
                    accept(spec, &bytes).map_err(|why| PluginError::Refused {
                        name: spec.name.clone(),
                        why,
                    })?;
                    Ok(plugin)
                }),
                Err(source) => Err(PluginError::Read {
                    name: spec.name.clone(),
                    path: spec.path.clone(),
                    source,
                }),
            };
            match (loaded, current) {
                (Ok(plugin), Some((_, slot))) => {
                    slot.swap(plugin);
                    next.push((spec.clone(), slot.clone()));
                    report.swapped.push(spec.name.clone());
                }
                (Ok(plugin), None) => {
                    next.push((spec.clone(), Slot::new(plugin, self.policy)));
                    report.added.push(spec.name.clone());
                }
                (Err(e), Some((old_spec, slot))) => {
                    // Keep the old version (and its old spec) serving.
                    tracing::error!(plugin = %spec.name, error = %e, "new version failed to load; the old version keeps serving");
                    slot.load_failed(e.to_string());
                    next.push((old_spec.clone(), slot.clone()));
                    report.failed.push((spec.name.clone(), e.to_string()));
                }
                (Err(e), None) => {
                    tracing::error!(plugin = %spec.name, error = %e, "plugin failed to load");
                    unloaded.insert(spec.name.clone(), (spec.clone(), e.to_string()));
                    report.failed.push((spec.name.clone(), e.to_string()));
                }
            }
        }
        for (spec, _) in &self.slots {
            if !next.iter().any(|(s, _)| s.name == spec.name) {
                report.removed.push(spec.name.clone());
            }
        }
        self.slots = next;
        self.unloaded = unloaded;
        self.reregister();
        report
    }
}

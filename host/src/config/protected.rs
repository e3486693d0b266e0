//! The places a deployment's own policy lives, which its built-in reject rules protect
//! ([`crate::rules::protect`]): the state directory, the deployment file, the plugin files and
//! directories it names, the audit signing key (which nothing may read), its public half and the
//! checkpoint copy, the compiled cache's key, and the running binary (the hook's command).

use std::path::Path;

use super::Deployment;
use crate::rules::protect::{Area, Protected};

impl Deployment {
    /// The built-in reject rules of this deployment served from `state_dir`.
    pub fn protected(&self, state_dir: &Path) -> Protected {
        let mut areas = vec![Area::tree("state-dir", "the state directory", state_dir)];
        if let Some(path) = &self.path {
            areas.push(Area::file("deployment", "the deployment file", path));
        }
        for plugin in &self.plugins {
            areas.push(Area::file(
                &format!("plugin-{}", plugin.name),
                format!("plugin {:?}", plugin.name),
                &plugin.path,
            ));
            for (guest, host) in &plugin.files {
                areas.push(Area::tree(
                    &format!("plugin-{}-files", plugin.name),
                    format!("plugin {:?}'s files ({guest})", plugin.name),
                    host,
                ));
            }
        }
        if let Some(key) = &self.signing_key {
            areas.push(Area::secret("signing-key", "the audit signing key", key));
            let mut public = key.clone().into_os_string();
            public.push(".pub");
            areas.push(Area::file(
                "public-key",
                "the audit public key",
                Path::new(&public),
            ));
        }
        if let Some(copy) = &self.checkpoint_copy {
            areas.push(Area::tree("checkpoint-copy", "the checkpoint copy", copy));
        }
        if let Some(key) = crate::plugin::cache::CacheKey::default_path() {
            areas.push(Area::secret("cache-key", "the compiled cache's key", &key));
        }
        if let Ok(binary) = std::env::current_exe() {
            areas.push(Area::file("binary", "the approval-host binary", &binary));
        }
        Protected::new(areas)
    }
}

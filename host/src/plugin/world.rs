//! What every plugin API version's module has alike around its generated `bindings`: adding
//! its host interfaces to a linker, its pre-linked `Template` and its live `Instance`. Each
//! version module invokes [`linked_world`] and adds its own host functions and `decide`; the
//! dispatch over versions ([`super::api`]) sits above them all.

/// What every version's module has alike around its generated `bindings`: adding its host
/// interfaces to a linker, its pre-linked `Template` and its live `Instance`. Each version adds
/// its own host functions and its `Instance::decide`.
macro_rules! linked_world {
    ($version:literal) => {
        #[doc = concat!("Adds the ", $version, " host interfaces to `linker`.")]
        pub(crate) fn add_to_linker(
            linker: &mut wasmtime::component::Linker<$crate::plugin::sandbox::PluginState>,
        ) -> wasmtime::Result<()> {
            bindings::Answerer::add_to_linker::<
                $crate::plugin::sandbox::PluginState,
                wasmtime::component::HasSelf<$crate::plugin::sandbox::PluginState>,
            >(linker, |s| s)
        }

        #[doc = concat!("A compiled, pre-linked ", $version, " plugin, ready to instantiate.")]
        pub(crate) struct Template {
            pre: bindings::AnswererPre<$crate::plugin::sandbox::PluginState>,
        }

        #[doc = concat!("A live ", $version, " instance.")]
        pub(crate) struct Instance {
            bindings: bindings::Answerer,
        }

        impl Template {
            #[doc = concat!("Links and type-checks `component` against the ", $version, " world.")]
            pub(crate) fn new(
                linker: &wasmtime::component::Linker<$crate::plugin::sandbox::PluginState>,
                component: &wasmtime::component::Component,
            ) -> wasmtime::Result<Template> {
                let pre = linker.instantiate_pre(component)?;
                Ok(Template {
                    pre: bindings::AnswererPre::new(pre)?,
                })
            }

            pub(crate) fn instantiate(
                &self,
                store: &mut wasmtime::Store<$crate::plugin::sandbox::PluginState>,
            ) -> wasmtime::Result<Instance> {
                Ok(Instance {
                    bindings: self.pre.instantiate(store)?,
                })
            }
        }
    };
}
pub(super) use linked_world;

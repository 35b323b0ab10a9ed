//! The host imports a plugin calls, served from the world's state.

use std::cell::RefCell;
use std::rc::Rc;

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use crate::context::{Backend, ClusterInfo, LogLevel};
use crate::error::ReadError;
use crate::resource::{ResourceType, Scope};
use rekon_rules::LabelSelector;

use super::error::LogLine;
use super::store::{Key, State, labels_match};

/// Serves a [`Context`] from the world's state.
pub(super) struct WorldBackend(pub(super) Rc<RefCell<State>>);

impl Backend for WorldBackend {
    fn get(
        &self,
        cluster: &str,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<String>, ReadError> {
        let state = self.0.borrow();
        state.check_read(cluster, resource)?;
        let namespace = if resource.scope == Scope::Cluster {
            None
        } else {
            namespace
        };
        let key = Key {
            cluster: cluster.to_owned(),
            group: resource.group.clone(),
            kind: resource.kind.clone(),
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        };
        Ok(state.objects.get(&key).map(|s| s.object.to_string()))
    }

    fn list(
        &self,
        cluster: &str,
        resource: &ResourceType,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<String>, ReadError> {
        let state = self.0.borrow();
        state.check_read(cluster, resource)?;
        let selector = match label_selector {
            Some(s) => {
                LabelSelector::parse(s).map_err(|e| ReadError::InvalidSelector(e.to_string()))?
            }
            None => LabelSelector::default(),
        };
        Ok(state
            .matching(cluster, resource, namespace)
            .filter(|obj| labels_match(&selector, obj))
            .map(Value::to_string)
            .collect())
    }

    fn clusters(&self) -> Vec<ClusterInfo> {
        self.0.borrow().clusters.clone()
    }

    fn log(&self, level: LogLevel, message: &str, fields: &[(String, String)]) {
        self.0.borrow_mut().logs.push(LogLine {
            level,
            message: message.to_owned(),
            fields: fields.to_vec(),
        });
    }

    fn request_time(&self) -> Timestamp {
        self.0.borrow().time
    }

    fn declare_settings_schema(&self, schema: &str) {
        self.0.borrow_mut().settings_schema = Some(schema.to_owned());
    }
}

impl crate::settings::SettingsSource for WorldBackend {
    fn settings(&self) -> Option<String> {
        self.0.borrow().settings.clone()
    }
}

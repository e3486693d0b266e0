//! Integration tests for approval-host: one binary, a module per behaviour area.

mod acp;
mod acp_agent;
mod authoring;
mod cache;
mod cli;
mod componentize;
mod conformance;
mod crash;
mod deployment;
mod durable_commit;
mod fixtures;
mod hooks;
mod plugin_api;
mod plugins;
mod policy;
mod reload;
mod rules;
mod sandbox;
mod seam;
mod serve;
mod session_log;
mod subagent;
mod subscribe;
mod support;
mod tamper;
mod tools;

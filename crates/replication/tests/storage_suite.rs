//! openraft's own storage test suite against the segment log storage and
//! the state machine, each built in a fresh temporary directory.

use nsq_replication::log::LogOptions;
use nsq_replication::machine::StateMachine;
use nsq_replication::store::LogStore;
use nsq_replication::{StorageError, TypeConfig};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{AnyError, StorageIOError};

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for Builder {
    async fn build(&self) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError> {
        let io = |e: std::io::Error| StorageError::from(StorageIOError::write(&e));
        let dir = tempfile::tempdir().map_err(io)?;
        let store = LogStore::open(dir.path(), LogOptions::default())
            .map_err(|e| StorageError::from(StorageIOError::write(AnyError::new(&e))))?;
        // The suite never reads the subscription; a dropped receiver only
        // means applied entries go nowhere.
        let (sm, _applied) = StateMachine::open(dir.path(), 16, None).map_err(io)?;
        Ok((dir, store, sm))
    }
}

#[test]
fn openraft_storage_suite_passes() {
    Suite::test_all(Builder).expect("openraft's storage suite");
}

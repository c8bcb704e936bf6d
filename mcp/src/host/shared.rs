//! The locking variant of the API (seed 000, the `_l` functions and `myri_api0_lock`): a
//! cloneable handle that many threads can use at once.

use super::{Api, ApiError, ChanRequest, Channel, RecvBuf, RouteSlot, SendBuf, SendError, Ticket};
use crate::routes::RouteId;
use myri_device::time::Time;
use myri_device::wire::Route;
use std::sync::{Arc, Mutex, MutexGuard};

/// A thread-safe handle to an [`Api`]: every call takes the lock for its duration.
#[derive(Clone)]
pub struct SharedApi {
    inner: Arc<Mutex<Api>>,
}

impl SharedApi {
    /// Shares `api`.
    pub fn new(api: Api) -> SharedApi {
        SharedApi {
            inner: Arc::new(Mutex::new(api)),
        }
    }

    /// Holds the lock across several calls (seed 000, `myri_api0_lock`/`unlock`).
    pub fn lock(&self) -> MutexGuard<'_, Api> {
        crate::host::unit::lock(&self.inner)
    }

    /// [`Api::get_send_buffer`] under the lock.
    pub fn get_send_buffer(&self) -> Result<SendBuf, ApiError> {
        self.lock().get_send_buffer()
    }

    /// [`Api::send`] under the lock.
    pub fn send(
        &self,
        chan: u8,
        route: RouteId,
        buf: SendBuf,
        len: usize,
    ) -> Result<Ticket, SendError<SendBuf>> {
        self.lock().send(chan, route, buf, len)
    }

    /// [`Api::free_send`] under the lock.
    pub fn free_send(&self, buf: SendBuf) {
        self.lock().free_send(buf);
    }

    /// [`Api::reap_sent`] under the lock.
    pub fn reap_sent(&self) {
        self.lock().reap_sent();
    }

    /// [`Api::recv`] under the lock.
    pub fn recv(&self, chan: &Channel) -> Result<Option<RecvBuf>, ApiError> {
        self.lock().recv(chan)
    }

    /// [`Api::get_chan`] under the lock.
    pub fn get_chan(&self, want: ChanRequest) -> Result<Channel, ApiError> {
        self.lock().get_chan(want)
    }

    /// [`Api::add_route`] under the lock.
    pub fn add_route(&self, slot: RouteSlot, route: &Route) -> Result<RouteId, ApiError> {
        self.lock().add_route(slot, route)
    }

    /// [`Api::progress`] under the lock.
    pub fn progress(&self, now: Time) -> bool {
        self.lock().progress(now)
    }
}

//! A mutex that `fork` can hold: the agent's state is locked in the `pthread_atfork` prepare
//! handler and unlocked in both processes afterwards, so a child never inherits it half-changed
//! or locked by a thread that does not exist in the child (std's Mutex cannot be unlocked
//! without its guard, and the prepare and child handlers are separate calls).

use std::cell::UnsafeCell;

pub(crate) struct ForkLock<T> {
    mutex: UnsafeCell<libc::pthread_mutex_t>,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached with the mutex held.
unsafe impl<T: Send> Sync for ForkLock<T> {}

struct Unlock<'a, T>(&'a ForkLock<T>);

impl<T> Drop for Unlock<'_, T> {
    fn drop(&mut self) {
        // SAFETY: locked by this thread (see `with` and `try_with`).
        unsafe { libc::pthread_mutex_unlock(self.0.mutex.get()) };
    }
}

impl<T> ForkLock<T> {
    pub(crate) const fn new(value: T) -> ForkLock<T> {
        ForkLock { mutex: UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER), value: UnsafeCell::new(value) }
    }

    pub(crate) fn with<R>(&self, work: impl FnOnce(&mut T) -> R) -> R {
        // SAFETY: a statically initialised mutex; unlocked by the guard, also on panic.
        unsafe { libc::pthread_mutex_lock(self.mutex.get()) };
        let _unlock = Unlock(self);
        // SAFETY: the mutex is held.
        work(unsafe { &mut *self.value.get() })
    }

    /// As `with`, or None at once if another thread holds the lock.
    pub(crate) fn try_with<R>(&self, work: impl FnOnce(&mut T) -> R) -> Option<R> {
        // SAFETY: as in `with`.
        if unsafe { libc::pthread_mutex_trylock(self.mutex.get()) } != 0 {
            return None;
        }
        let _unlock = Unlock(self);
        // SAFETY: the mutex is held.
        Some(work(unsafe { &mut *self.value.get() }))
    }

    /// `pthread_atfork` prepare: hold the lock across the fork.
    pub(crate) fn lock_for_fork(&self) {
        // SAFETY: released by `unlock_after_fork` in the parent and in the child.
        unsafe { libc::pthread_mutex_lock(self.mutex.get()) };
    }

    /// `pthread_atfork` parent and child: the forking thread (the child's only thread) owns it.
    pub(crate) fn unlock_after_fork(&self) {
        // SAFETY: locked by this thread in `lock_for_fork`.
        unsafe { libc::pthread_mutex_unlock(self.mutex.get()) };
    }
}

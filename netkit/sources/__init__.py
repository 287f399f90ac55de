"""Where netkit's objects come from: the Kubernetes API (`kube`, one `reflector` per resource) or
manifest files (`manifests` for one-shot commands, `files` for the daemon). Every live source feeds
the `store`, which the daemon reads; a `store.Source` is anything with `async run()`."""

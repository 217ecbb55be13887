//! The archive in object storage (`storage.url`): where its files and manifest segments live
//! in a bucket, and how readers anywhere take the files that are live from the manifests there
//! ([`remote`]); the upload of every manifest's lines, each batch of them only after the files
//! they add ([`upload`]); and, with `storage.local_keep`, the deletion of the local copies of
//! uploaded files whose partition hour ended longer ago than that ([`offload`]).

pub mod offload;
pub mod remote;
pub mod upload;

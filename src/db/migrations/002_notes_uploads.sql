-- Notes and uploads (issue: notes, likes, follows, feed, sign-in, UV, uploads).
--
-- tb_blog_upload: who uploaded which image, so that only the uploader may delete it. The name is
-- the store key we generated ("blogs/7/14/<uuid>.jpg"); never a client-supplied name.
CREATE TABLE IF NOT EXISTS tb_blog_upload (
  name VARCHAR(128) NOT NULL COMMENT 'blob store key, e.g. blogs/7/14/<uuid>.jpg',
  user_id BIGINT UNSIGNED NOT NULL,
  content_type VARCHAR(32) NOT NULL,
  size INT UNSIGNED NOT NULL COMMENT 'bytes',
  create_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
  PRIMARY KEY (name),
  KEY idx_user (user_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- tb_blog.liked mirrors ZCARD(blog:liked:{id}). Each like toggle hands out a version (Redis, in
-- the same atomic step as the toggle) and MySQL accepts a count only with a newer version, so
-- concurrent or reordered writes converge on the latest count (src/services/blog.ts).
-- MySQL 8 has no ADD COLUMN IF NOT EXISTS: this is the file's last statement, one atomic DDL, and
-- the migrator records the file right after it.
ALTER TABLE tb_blog ADD COLUMN liked_version BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'version of the liked count, see lua/blog-like-toggle.lua';
